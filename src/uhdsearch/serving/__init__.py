"""The HTTP search service (extra: serve): create_app(service) -> FastAPI, the page at `/`, `uhdsearch serve`.

settings (limits and the API key), documents (texts behind the doc ids), service (the index snapshot searches
read, the one writer), explain (why a document matched: dimensions, tokens, typical tokens), metrics
(Prometheus), app (routes, errors, body limit), schemas (pydantic request and response models), static/ (the page).
"""
