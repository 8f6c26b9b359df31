"""Request and response bodies (pydantic): the OpenAPI schema at /openapi.json is generated from these."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt option is an error, not silently ignored


# SearchRequest's fields that are SearchOptions (search/options.py parses them, as the CLI's flags)
SEARCH_OPTIONS = ("scoring", "query_k", "bucket_weights", "max_df", "idf", "cascade", "length_norm")


class QueryIn(_Strict):
    query_id: str = Field(min_length=1, max_length=200)
    text: str


class SearchRequest(_Strict):
    queries: list[QueryIn] = Field(min_length=1)
    k: int = Field(10, ge=1)
    scoring: str | None = Field(None, pattern="^(binary|weighted)$")
    query_k: int | None = Field(None, ge=0, description="top dimensions per query bucket; 0 keeps all")
    bucket_weights: list[float] | None = None
    max_df: str | float = Field("auto", description="stop dimensions: auto, none, or a fraction in (0, 1]")
    cascade: str = Field("auto", description="two-pass search: auto, none (exact), or FIRST_MAX_DF:DEPTH[:probe]")
    length_norm: str | float = Field("auto", description="binary counts / active dims ** ALPHA: auto, none, or ALPHA")
    idf: bool = Field(False, description="weight query dims by IDF")
    candidates: dict[str, list[str]] | None = Field(
        None, description="query_id -> doc_ids to re-rank instead of searching the whole index")


class Hit(BaseModel):
    doc_id: str
    score: float
    rank: int
    title: str
    snippet: str


class QueryResult(BaseModel):
    query_id: str
    text: str
    hits: list[Hit]


class SearchResponse(BaseModel):
    system: str
    k: int
    generation: int | None
    results: list[QueryResult]


class DocumentIn(_Strict):
    doc_id: str = Field(min_length=1, max_length=200, pattern=r"^[^\r\n]+$")
    title: str = ""
    text: str


class AddRequest(_Strict):
    documents: list[DocumentIn] = Field(min_length=1)
    replace: bool = False


class DocumentOut(BaseModel):
    doc_id: str
    title: str
    text: str
