"""Load test of `uhdsearch serve`: 50 concurrent clients for 60 s, mixed /search and /explain (locust, headless).

Run 1 serves the 100k-document index of synthetic_binary.py (texts lent from SciFact's documents, see texts_for);
run 2 the same 100k documents as a segmented index while one writer adds SciFact documents (encoded by the server),
deletes and commits. Every search in run 2 checks that it sees a committed state: each writer batch is 4 copies of
one text, so a query with that text finds all 4 or none (never a half-added or half-deleted batch); a violation
counts as a failed request. The server runs as `uhdsearch serve` in its own process; its resident memory is read
when it is ready, after the warm-up and at the end of the load.

    .venv/bin/python -m benchmarks.speed.serve_load                  # both runs, settings from configs/serve_load.toml
    .venv/bin/python -m benchmarks.speed.serve_load --duration 5 --users 5 --out /tmp/smoke.json
    # before and after in one run: each run first with the server code of another checkout's src/
    .venv/bin/python -m benchmarks.speed.serve_load --baseline-src /tmp/old/src --runs static

Writes go with the key in UHDSEARCH_API_KEY (the server's environment). Prints a table and writes
benchmarks/results/serve_load.json.
"""
from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # before anything imports ssl or sockets (locust's requirement)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
import psutil  # noqa: E402
from locust import FastHttpUser, between, task  # noqa: E402
from locust.env import Environment  # noqa: E402

from benchmarks.lib.settings import RESULTS, ROOT, comma_list, parse_args, record  # noqa: E402

OUT_JSON = RESULTS / "serve_load.json"
COPIES = 4
API_KEY = "serve-load-benchmark"  # the server's UHDSEARCH_API_KEY; the writer sends it
SHARED: dict = {}  # what the users of a run read: queries, explain pairs, the writer's batches


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Searcher(FastHttpUser):
    weight = 1

    @task
    def one_request(self) -> None:
        if random.random() < SHARED["explain_share"]:
            query, doc_id = random.choice(SHARED["explain_pairs"])
            self.client.get("/explain", params={"q": query, "doc_id": doc_id}, name="/explain")
            return
        batches = SHARED.get("batches")
        if batches and random.random() < 0.5:
            self.check_batch(random.choice(batches))
            return
        self.client.get("/search", params={"q": random.choice(SHARED["queries"]), "k": SHARED["k"]}, name="/search")

    def check_batch(self, batch: dict) -> None:
        with self.client.get("/search", params={"q": batch["text"], "k": 2 * COPIES + 2}, name="/search",
                             catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"status {response.status_code}")
                return
            seen = sum(h["doc_id"].startswith(batch["prefix"]) for h in response.json()["results"][0]["hits"])
            if seen not in (0, COPIES):
                response.failure(f"{seen} of the {COPIES} documents of {batch['prefix']}: a half-committed state")


class Writer(FastHttpUser):
    fixed_count = 0  # set to 1 for the run with a writer

    @task
    def write(self) -> None:
        number = SHARED["next_batch"] = SHARED.get("next_batch", 0) + 1
        title, text = SHARED["texts"][number % len(SHARED["texts"])]  # no two batches share a text
        prefix = f"w{number}-"
        documents = [{"doc_id": f"{prefix}{i}", "title": title, "text": text} for i in range(COPIES)]
        batch = {"prefix": prefix, "text": f"{title} {text}"[:500]}
        SHARED["batches"].append(batch)  # searched before, during and after its commit: 0 or 4, never 1-3
        key = {"X-API-Key": API_KEY}
        self.client.post("/documents", json={"documents": documents}, headers=key, name="/documents (add)")
        if number % 3 == 0:  # delete a whole earlier batch in the same commit
            for i in range(COPIES):
                self.client.delete(f"/documents/w{number - 2}-{i}", headers=key, name="/documents (delete)")
        self.client.post("/commit", headers=key, name="/commit")
        time.sleep(SHARED["writer_pause"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(index_dir: Path, model: Path, data: Path | None, port: int, typical_sample: int,
                 serve_options: list[str], log_file: Path, src: Path = ROOT / "src") -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "UHDSEARCH_API_KEY": API_KEY}
    command = [sys.executable, "-m", "uhdsearch.cli.main", "--quiet", "serve", str(index_dir), "--model", str(model),
               "--port", str(port), "--typical-sample", str(typical_sample), *serve_options]
    if data is not None:
        command += ["--data", str(data)]
    # A file, not a pipe: an unread pipe fills with the access log and then blocks the server.
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "w", encoding="utf-8") as log_out:
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log_out, text=True)


def wait_ready(base: str, process: subprocess.Popen, log_file: Path, timeout: float = 900) -> None:
    import requests

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited; its log: {log_file}")
        try:
            health = requests.get(f"{base}/health", timeout=5).json()
            if requests.get(f"{base}/ready", timeout=5).status_code == 200 and (
                    health["typical_tokens"] or not health["document_texts"]):
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise SystemExit(f"{base} not ready after {timeout} s")


def build_live_index(source: Path, directory: Path) -> Path:
    """A segmented index holding the vectors of a static index (no re-encoding), in a fresh directory."""
    from uhdsearch.index.inverted import InvertedIndex
    from uhdsearch.index.live.segments import SegmentedIndex

    shutil.rmtree(directory, ignore_errors=True)
    static = InvertedIndex.load(source)
    vectors = static.document_vectors()
    with SegmentedIndex.create(directory, static.variant, static.dim, static.n_buckets,
                               static.encoder_digest) as live:
        live.add(vectors, list(static.doc_ids))
        live.commit()
    return directory


def texts_for(index_dir: Path, path: Path) -> Path:
    """A corpus.jsonl giving the index's synthetic ids the texts of SciFact's documents in turn (written once).

    The postings are synthetic, so the texts do not match them; they are there so that hits carry titles and
    snippets and /explain does its document-side work (encoding the document's tokens), as on a real index.
    """
    from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_corpus
    from uhdsearch.index.inverted import InvertedIndex

    if path.is_file():
        return path
    documents = list(load_corpus(bundled_dataset_dir("scifact") / "corpus.jsonl").values())
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    with open(partial, "w", encoding="utf-8") as f:
        for i, doc_id in enumerate(InvertedIndex.load(index_dir).doc_ids):
            d = documents[i % len(documents)]
            f.write(json.dumps({"_id": doc_id, "title": d.title, "text": d.text}) + "\n")
    partial.replace(path)
    return path


def one_run(name: str, index_dir: Path, data: Path | None, args, queries: list[str], writer: bool,
            src: Path = ROOT / "src") -> dict:
    import requests

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    log_file = ROOT / args.work_dir / f"server-{'writer' if writer else 'static'}-{len(name)}.log"
    process = start_server(index_dir, ROOT / args.model, data, port, args.typical_sample, args.serve_options,
                           log_file, src)
    try:
        wait_ready(base, process, log_file)
        log(f"{name}: server ready after {time.perf_counter() - started:.0f} s")
        pairs = []
        for q in queries[:50]:  # /explain asks about a top-3 document of the query
            hits = requests.get(f"{base}/search", params={"q": q, "k": 3}).json()["results"][0]["hits"]
            pairs += [(q, h["doc_id"]) for h in hits]
        SHARED.clear()
        SHARED.update(queries=queries, explain_pairs=pairs, explain_share=args.explain_share, k=args.k,
                      batches=[], writer_pause=args.writer_pause)
        if writer:
            from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_corpus

            corpus = load_corpus(bundled_dataset_dir("scifact") / "corpus.jsonl")
            SHARED["texts"] = [(d.title, d.text) for d in list(corpus.values())[:500]]
        Searcher.wait_time = between(*args.think_time)
        Writer.wait_time = between(0, 0)
        Writer.fixed_count = 1 if writer else 0
        user_classes = [Searcher, Writer] if writer else [Searcher]
        server = psutil.Process(process.pid)
        rss_ready = server.memory_info().rss
        env = Environment(user_classes=user_classes, host=base)
        measured: list[tuple[float, bool]] = []  # (ms, failed) of reads answered after the warm-up

        def on_request(name, response_time, exception=None, **_):
            if SHARED.get("measuring") and name in ("/search", "/explain"):
                measured.append((response_time, exception is not None))

        env.events.request.add_listener(on_request)
        runner = env.create_local_runner()
        runner.start(args.users + (1 if writer else 0), spawn_rate=args.users)
        # Memory growth is read from the end of a warm-up under the same load (first use of every code path, the
        # first commit's reopen), so it measures what the run keeps adding, not one-off start-up allocations.
        # Requests (and failures: every consistency check) count over warm-up and run together.
        gevent.sleep(args.warm_up)
        SHARED["measuring"] = True
        rss_start = server.memory_info().rss
        cpu_start = (sum(server.cpu_times()[:2]), sum(psutil.Process().cpu_times()[:2]))
        gevent.sleep(args.duration)
        runner.quit()
        rss_end = server.memory_info().rss
        cpu_end = (sum(server.cpu_times()[:2]), sum(psutil.Process().cpu_times()[:2]))
        health = requests.get(f"{base}/health").json()
        result = summarize(name, env, rss_start, rss_end, health, writer)
        result["explain_cache"] = explain_cache(requests.get(f"{base}/metrics").text)
        result["rss_ready_mb"] = round(rss_ready / 2**20, 1)
        result["server_src"] = str(src)
        result["after_warm_up"] = after_warm_up(measured, args.duration)
        # CPU seconds per second of the measured part: the server's, and this process's (locust's users)
        result["cores_busy"] = {"server": round((cpu_end[0] - cpu_start[0]) / args.duration, 2),
                                "load_generator": round((cpu_end[1] - cpu_start[1]) / args.duration, 2)}
        return result
    finally:
        stopping = time.perf_counter()
        process.terminate()  # SIGTERM: the server finishes in-flight requests, then exits
        try:
            process.wait(120)
            log(f"{name}: server stopped {time.perf_counter() - stopping:.1f} s after SIGTERM")
        except subprocess.TimeoutExpired:
            process.kill()
            log(f"{name}: server still running 120 s after SIGTERM: killed (see {log_file})")


def after_warm_up(measured: list[tuple[float, bool]], seconds: float) -> dict:
    """Reads answered in the measured part only: the steady state, without start-up (first uses, cold caches)."""
    import numpy as np

    times = np.array([ms for ms, _ in measured]) if measured else np.zeros(1)
    return {"requests": len(measured), "failures": sum(failed for _, failed in measured),
            "rps": round(len(measured) / seconds, 2), "p50_ms": round(float(np.percentile(times, 50)), 1),
            "p99_ms": round(float(np.percentile(times, 99)), 1)}


def explain_cache(metrics: str) -> dict[str, int] | None:
    """/explain's document cache lookups from /metrics (hit, miss), None from a server without the cache."""
    found = dict(re.findall(r'^uhdsearch_explain_cache_lookups\{result="(\w+)"\} ([0-9.e+]+)$', metrics, re.M))
    return {k: int(float(v)) for k, v in found.items()} or None


def summarize(name: str, env, rss_start: int, rss_end: int, health: dict, writer: bool) -> dict:
    def entry(stats) -> dict:
        return {"requests": stats.num_requests, "failures": stats.num_failures, "rps": round(stats.total_rps, 2),
                "p50_ms": stats.get_response_time_percentile(0.5),
                "p99_ms": stats.get_response_time_percentile(0.99),
                "mean_ms": round(stats.avg_response_time, 1)}

    endpoints = {f"{method} {stat_name}": entry(s) for (stat_name, method), s in env.stats.entries.items()}
    reads = [s for (stat_name, _), s in env.stats.entries.items() if stat_name in ("/search", "/explain")]
    read_requests = sum(s.num_requests for s in reads)
    return {
        "name": name, "writer": writer, "total": entry(env.stats.total), "endpoints": endpoints,
        "read_requests": read_requests, "read_failures": sum(s.num_failures for s in reads),
        "errors": {f"{e.method} {e.name}: {e.error}": e.occurrences for e in env.stats.errors.values()},
        "consistency_checks": "each writer batch is 4 copies of one text; searches for it saw 0 or 4" if writer
        else None,
        "rss_start_mb": round(rss_start / 2**20, 1), "rss_end_mb": round(rss_end / 2**20, 1),
        "rss_growth": round(rss_end / rss_start - 1, 4),
        "n_documents_end": health["n_documents"], "generation_end": health["generation"],
        "n_segments_end": health.get("n_segments"),
    }


def table(runs: list[dict]) -> str:
    lines = [f"{'run':42s} {'endpoint':24s} {'requests':>8s} {'fail':>5s} {'rps':>7s} {'p50 ms':>7s} {'p99 ms':>7s}"]
    for run in runs:
        for endpoint, e in {**run["endpoints"], "all": run["total"]}.items():
            lines.append(f"{run['name']:42s} {endpoint:24s} {e['requests']:8d} {e['failures']:5d} {e['rps']:7.1f} "
                         f"{e['p50_ms']:7.0f} {e['p99_ms']:7.0f}")
        lines.append(f"{run['name']:42s} RSS {run['rss_start_mb']:.0f} MB -> {run['rss_end_mb']:.0f} MB "
                     f"({100 * run['rss_growth']:+.1f} %)")
    return "\n".join(lines)


def cpu_model() -> dict:
    """The CPU's name and the vector extensions the encoder and kernels can use."""
    found = {"name": platform.processor() or "unknown", "vector_flags": []}
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        if line.startswith("model name"):
            found["name"] = line.split(":", 1)[1].strip()
        elif line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            found["vector_flags"] = sorted(f for f in flags if f.startswith(("avx", "sse4", "fma", "amx")))
            break
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int)
    parser.add_argument("--duration", type=float)
    parser.add_argument("--warm-up", dest="warm_up", type=float, help="seconds of load before the measured part")
    parser.add_argument("--think-time", dest="think_time", type=comma_list(float))
    parser.add_argument("--explain-share", dest="explain_share", type=float)
    parser.add_argument("--k", type=int)
    parser.add_argument("--static-index", dest="static_index")
    parser.add_argument("--model")
    parser.add_argument("--live-source", dest="live_source")
    parser.add_argument("--writer-pause", dest="writer_pause", type=float)
    parser.add_argument("--work-dir", dest="work_dir")
    parser.add_argument("--typical-sample", dest="typical_sample", type=int)
    parser.add_argument("--serve-options", dest="serve_options", type=lambda s: s.split(),
                        help="extra `uhdsearch serve` options, space-separated, e.g. '--onnx --workers 2'")
    parser.add_argument("--runs", default="static,writer", help="which runs: static, writer or both")
    parser.add_argument("--baseline-src", dest="baseline_src", type=Path,
                        help="run each run first with the server code of this src/ directory (before vs after)")
    parser.add_argument("--label", default="", help="what differs from the configured benchmark (a reduced run)")
    parser.add_argument("--out", type=Path, default=OUT_JSON)
    return parser


def main(argv: list[str] | None = None) -> None:
    args, config, settings = parse_args(build_parser(), "serve_load", argv)
    from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_queries
    from uhdsearch.index.inverted import InvertedIndex

    scifact = bundled_dataset_dir("scifact")
    queries = [q.text for q in load_queries(scifact / "queries.jsonl").values()]
    load_before = os.getloadavg()
    runs = []
    wanted = args.runs.split(",")
    servers = [("before: ", args.baseline_src.resolve()), ("after: ", ROOT / "src")] if args.baseline_src else \
        [("", ROOT / "src")]
    for prefix, src in servers:
        if "static" in wanted:
            texts = texts_for(ROOT / args.static_index, ROOT / args.work_dir / "texts-static.jsonl")
            runs.append(one_run(f"{prefix}100k static, search+explain", ROOT / args.static_index, texts, args,
                                queries, False, src))
        if "writer" in wanted:
            live = build_live_index(ROOT / args.live_source, ROOT / args.work_dir / "live")
            n = len(InvertedIndex.load(ROOT / args.live_source).doc_ids)
            texts = texts_for(ROOT / args.live_source, ROOT / args.work_dir / "texts-live.jsonl")
            runs.append(one_run(f"{prefix}{n // 1000}k segmented, + writer", live, texts, args, queries, True, src))
    print(table(runs))
    result = {"runs": runs, "label": args.label, "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
              "cpu_affinity": len(os.sched_getaffinity(0)), "load_average_before": load_before,
              "load_average_after": os.getloadavg(),
              "platform": platform.platform(), **record(config, settings)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
