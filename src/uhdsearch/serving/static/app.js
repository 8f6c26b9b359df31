// The search page: calls /search (and /search?system=bm25), and /explain for "why this matched". No build step.
"use strict";

const $ = (id) => document.getElementById(id);
let health = null;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "style") Object.assign(node.style, value);  // CSSOM: the CSP refuses style attributes
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

async function getJSON(url) {
  const response = await fetch(url);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function searchParams(extra = {}) {
  const params = new URLSearchParams({ q: $("q").value, k: $("k").value, ...extra });
  if ($("scoring").value) params.set("scoring", $("scoring").value);
  return params;
}

function tokens(list, label) {
  const cell = el("td");
  if (list === null || list === undefined) { cell.append(el("span", { class: "muted" }, label)); return cell; }
  list.forEach((t, i) => cell.append(el("span", { class: i === 0 ? "tok top" : "tok" }, t.token)));
  return cell;
}

function explainPanel(data) {
  const panel = el("div", { class: "explain" });
  panel.append(el("div", {}, `score ${data.score.toFixed(3)} from ${data.buckets.reduce((n, b) => n + b.n_matched, 0)}`
    + ` shared dimensions of the query's ${data.n_query_dims} (${data.scoring})`));
  for (const bucket of data.buckets) {
    panel.append(el("div", { class: "muted" }, `bucket ${bucket.bucket} (layer ${bucket.layer}, weight ${bucket.weight}):`
      + ` ${bucket.n_matched} dimensions, ${bucket.score.toFixed(3)}`));
    const top = Math.max(...bucket.dims.map((d) => d.contribution), 1e-9);
    const table = el("table", { class: "dims", "data-bucket": bucket.bucket },
      el("tr", {}, el("th", {}, "dim"), el("th", {}, "contribution"), el("th", {}, "query tokens"),
        el("th", {}, "document tokens"), el("th", {}, "typical tokens in the corpus")));
    for (const d of bucket.dims) {
      table.append(el("tr", { class: "dim", "data-dim": d.dim },
        el("td", {}, d.dim),
        el("td", {}, el("span", { class: "bar", style: { width: `${Math.round(60 * d.contribution / top)}px` } }),
          ` ${d.contribution.toFixed(3)}`),
        tokens(d.query_tokens, "—"), tokens(d.document_tokens, "no text"),
        tokens(d.typical_tokens, data.typical_tokens === "pending" ? "computing…" : "—")));
    }
    panel.append(table);
  }
  return panel;
}

async function toggleExplain(item, docId, query, button) {
  const open = item.querySelector(".explain");
  if (open) { open.remove(); button.textContent = "why this matched"; return; }
  button.disabled = true;
  try {
    const params = searchParams({ doc_id: docId, q: query });
    params.delete("k");
    item.append(explainPanel(await getJSON(`/explain?${params}`)));
    button.textContent = "hide";
  } catch (error) {
    item.append(el("div", { class: "explain error" }, error.message));
  } finally {
    button.disabled = false;
  }
}

function renderHits(list, result, withExplain) {
  list.replaceChildren();
  for (const hit of result.hits) {
    const item = el("li", { class: "hit", "data-doc-id": hit.doc_id },
      el("span", { class: "title" }, hit.title || hit.doc_id),
      el("span", { class: "meta" }, `${hit.doc_id} · score ${hit.score.toFixed(3)}`),
      el("p", { class: "snippet" }, hit.snippet));
    if (withExplain) {
      const button = el("button", { class: "why", type: "button" }, "why this matched");
      button.addEventListener("click", () => toggleExplain(item, hit.doc_id, result.text, button));
      item.append(button);
    }
    list.append(item);
  }
  if (!result.hits.length) list.append(el("li", { class: "muted" }, "no documents share a dimension with the query"));
}

async function search(event) {
  event.preventDefault();
  const compare = $("compare").checked;
  $("message").textContent = "searching…";
  try {
    const [uhd, bm25] = await Promise.all([
      getJSON(`/search?${searchParams()}`),
      compare ? getJSON(`/search?${searchParams({ system: "bm25" })}`) : null]);
    renderHits($("results"), uhd.results[0], true);
    $("bm25-column").hidden = !compare;
    $("uhd-column").querySelector("h2").hidden = !compare;
    if (bm25) renderHits($("bm25-results"), bm25.results[0], false);
    $("message").textContent = `${uhd.results[0].hits.length} results`;
  } catch (error) {
    $("message").textContent = `error: ${error.message}`;
  }
}

async function start() {
  $("search-form").addEventListener("submit", search);
  try {
    health = await getJSON("/health");
    $("status").textContent = `${health.n_documents} documents · ${health.variant} index`
      + (health.generation === null ? "" : ` · generation ${health.generation}`);
    $("compare-label").hidden = !health.bm25;
  } catch (error) {
    $("status").textContent = `server unavailable: ${error.message}`;
  }
}

start();
