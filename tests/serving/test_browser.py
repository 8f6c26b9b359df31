"""End to end: the real server under uvicorn, the page driven in headless Chromium (Debian's chromium and
chromium-driver, installed by scripts/setup.sh), checked against the JSON API; then SIGTERM."""
from __future__ import annotations

import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.serving.server_process import free_port, start_server, wait_ready  # noqa: E402

pytest.importorskip("selenium")
httpx = pytest.importorskip("httpx")

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium")
                 if p and Path(p).is_file()), None)
DRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").is_file() else None)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None or DRIVER is None,
                       reason="no chromium / chromedriver binary: apt-get install chromium chromium-driver "
                              "(scripts/setup.sh does, as root)"),
]
QUERY = "vitamin d deficiency and bone density"
XSS = ' <img src=x onerror="document.title=\'xss\'">'


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console: CSP violations show there
    return webdriver.Chrome(service=Service(DRIVER), options=options)


def drive_page(driver, base: str, query: str, compare: bool, screenshot: Path | None = None) -> dict:
    """Type the query, search, open the first "why this matched"; returns what the page shows."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as seen
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, 60)
    driver.get(base + "/")
    wait.until(lambda d: "documents" in d.find_element(By.ID, "status").text)
    box = driver.find_element(By.ID, "q")
    box.clear()
    box.send_keys(query)
    if compare:
        wait.until(seen.visibility_of_element_located((By.ID, "compare"))).click()
    driver.find_element(By.ID, "go").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#results li.hit"))
    hits = [li.get_attribute("data-doc-id") for li in driver.find_elements(By.CSS_SELECTOR, "#results li.hit")]
    bm25 = [li.get_attribute("data-doc-id") for li in driver.find_elements(By.CSS_SELECTOR, "#bm25-results li.hit")]
    first = driver.find_element(By.CSS_SELECTOR, "#results li.hit")
    first.find_element(By.CSS_SELECTOR, "button.why").click()
    wait.until(lambda d: first.find_elements(By.CSS_SELECTOR, ".explain tr.dim"))
    dims = {int(table.get_attribute("data-bucket")): [int(tr.get_attribute("data-dim"))
                                                      for tr in table.find_elements(By.CSS_SELECTOR, "tr.dim")]
            for table in first.find_elements(By.CSS_SELECTOR, ".explain table.dims")}
    tokens = [td.text for td in first.find_elements(By.CSS_SELECTOR, ".explain tr.dim td:nth-child(3)")]
    bars = [bar.size["width"] for bar in first.find_elements(By.CSS_SELECTOR, ".explain .bar")]
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(screenshot))
    titles = [t.text for t in driver.find_elements(By.CSS_SELECTOR, "#results li.hit .title")]
    injected = driver.find_elements(By.CSS_SELECTOR, "#results img, #bm25-results img")
    console = [entry["message"] for entry in driver.get_log("browser")]
    return {"hits": hits, "bm25": bm25, "dims": dims, "query_tokens": tokens, "bars": bars, "console": console,
            "titles": titles, "injected": len(injected), "page_title": driver.title}


@pytest.fixture(scope="module")
def server(served, tmp_path_factory):
    import json

    # Every title ends in markup that would run script if the page inserted it as HTML.
    corpus = tmp_path_factory.mktemp("xss") / "corpus.jsonl"
    with open(served / "corpus.jsonl", encoding="utf-8") as source, open(corpus, "w", encoding="utf-8") as out:
        for line in source:
            row = json.loads(line)
            out.write(json.dumps({**row, "title": row["title"] + XSS}) + "\n")
    port = free_port()
    process = start_server(served / "index", served / "model", port, "--data", str(corpus),
                           "--bm25", "--typical-sample", "40")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, process)
        yield base, process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_page_shows_the_api_ranking_and_its_explanation(server, tmp_path):
    base, _ = server
    driver = browser()
    try:
        shown = drive_page(driver, base, QUERY, compare=True, screenshot=tmp_path / "serve.png")
    finally:
        driver.quit()
    api = httpx.get(f"{base}/search", params={"q": QUERY, "k": 10}).json()["results"][0]["hits"]
    assert shown["hits"] == [h["doc_id"] for h in api] and len(api) == 10
    bm25 = httpx.get(f"{base}/search", params={"q": QUERY, "k": 10, "system": "bm25"}).json()["results"][0]["hits"]
    assert shown["bm25"] == [h["doc_id"] for h in bm25]
    explained = httpx.get(f"{base}/explain", params={"q": QUERY, "doc_id": api[0]["doc_id"]}).json()
    assert shown["dims"] == {b["bucket"]: [d["dim"] for d in b["dims"]] for b in explained["buckets"]}
    assert sum(map(len, shown["dims"].values())) > 0 and all(shown["query_tokens"])
    assert (tmp_path / "serve.png").stat().st_size > 10_000
    # The page runs under the CSP (default-src 'self'): nothing refused, the bars' widths (set by script) applied.
    assert not [m for m in shown["console"] if "Content Security Policy" in m], shown["console"]
    assert max(shown["bars"]) == 60
    # Titles with markup show as text: no element made of them, no script run.
    assert shown["titles"] and all(t.endswith(XSS.strip()) for t in shown["titles"])
    assert shown["injected"] == 0 and shown["page_title"] == "uhdsearch"
    assert "default-src 'self'" in httpx.get(f"{base}/").headers["content-security-policy"]


def test_sigterm_finishes_the_request_in_flight(server):
    base, process = server
    body = {"queries": [{"query_id": str(i), "text": f"{QUERY} {i}"} for i in range(64)], "k": 100}
    answer = {}

    def ask():
        answer["response"] = httpx.post(f"{base}/search", json=body, timeout=60)

    asking = threading.Thread(target=ask)
    asking.start()
    time.sleep(0.1)  # the batch takes longer than this to answer: SIGTERM arrives while it runs
    process.send_signal(signal.SIGTERM)
    asking.join(60)
    # uvicorn shuts down gracefully, then re-raises the signal it caught (exit status -15), as a killed process.
    assert process.wait(60) in (0, -signal.SIGTERM)
    assert answer["response"].status_code == 200 and len(answer["response"].json()["results"]) == 64
    log = process.stdout.read()
    assert "Shutting down" in log and "Finished server process" in log
