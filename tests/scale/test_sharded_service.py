"""`uhdsearch serve --shards N`: the HTTP service over Ray shards answers as the unsharded service does."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from uhdsearch.errors import UsageError  # noqa: E402
from uhdsearch.scale.sharded_service import open_sharded_service, shard_dirs_for  # noqa: E402
from uhdsearch.serving.app import create_app  # noqa: E402
from uhdsearch.serving.service import SearchService  # noqa: E402
from uhdsearch.serving.settings import ServeSettings  # noqa: E402

QUERIES = ["vitamin d deficiency and bone density", "cancer cells", "the"]


@pytest.fixture(scope="module")
def static_index(tmp_path_factory, tiny_encoder_session, mini_data, mini_encoding):
    from uhdsearch.index.inverted import WeightedIndex

    root = tmp_path_factory.mktemp("sharded-service")
    WeightedIndex.from_encoding(mini_encoding, list(mini_data.corpus), root / "index", tiny_encoder_session.digest())
    return root / "index"


def _answers(service, queries=QUERIES, ks=(1, 10, 400), scorings=("binary", "weighted")) -> list:
    out = []
    # generous timeout: each shard actor compiles its kernels on first use, slow on a busy 2-core machine
    with TestClient(create_app(service, ServeSettings(queue_timeout_s=600)), base_url="http://localhost") as client:
        for q in queries:
            for k in ks:
                for scoring in scorings:
                    response = client.get("/search", params={"q": q, "k": k, "scoring": scoring})
                    assert response.status_code == 200, response.text
                    body = response.json()["results"][0]
                    out.append([(h["doc_id"], h["rank"], round(h["score"], 5)) for h in body["hits"]])
            hit = client.get("/search", params={"q": q, "k": 1}).json()["results"][0]["hits"][0]
            explain = client.get("/explain", params={"q": q, "doc_id": hit["doc_id"], "scoring": "weighted"}).json()
            out.append(json.dumps(explain, sort_keys=True))
    return out


def test_sharded_service_answers_as_the_unsharded_one(ray_cluster, tiny_encoder_session, mini_data, static_index,
                                                      tmp_path):
    plain = SearchService.open(tiny_encoder_session, static_index, mini_data.corpus)
    sharded = open_sharded_service(tiny_encoder_session, static_index, 3, None, tmp_path / "shards", mini_data.corpus)
    try:
        assert sharded.snapshot.index.n_shards == 3
        expected, got = _answers(plain), _answers(sharded)
        assert len(expected) == len(got) == len(QUERIES) * 7
        assert got == expected
        assert sum(len(a) for a in expected if isinstance(a, list)) > 0
        # read-only: writes refused with the reason
        with TestClient(create_app(sharded), base_url="http://localhost") as client:
            response = client.post("/commit")
            assert response.status_code == 405 and "read-only shards" in response.json()["error"]
    finally:
        sharded.snapshot.index.close()


def test_matching_shards_are_reused_and_others_rewritten(tiny_encoder_session, static_index, tmp_path):
    shards = tmp_path / "shards"
    first = shard_dirs_for(static_index, 2, shards)
    stamps = [p.stat().st_mtime_ns for p in first]
    again = shard_dirs_for(static_index, 2, shards)
    assert again == first and [p.stat().st_mtime_ns for p in again] == stamps  # reused, not rewritten
    three = shard_dirs_for(static_index, 3, shards)
    assert sorted(p.name for p in shards.iterdir()) == ["shard_0", "shard_1", "shard_2", "source.json"]
    assert [p.name for p in three] == ["shard_0", "shard_1", "shard_2"]
    back = shard_dirs_for(static_index, 2, shards)  # the third shard of the earlier split goes
    assert sorted(p.name for p in shards.iterdir()) == ["shard_0", "shard_1", "source.json"] and len(back) == 2


def test_a_shard_dir_holding_other_things_is_refused(static_index, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not only shards"):
        shard_dirs_for(static_index, 2, tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize(("args", "words"), [
    (["--shards", "-1"], "--shards -1"),
    (["--ray", "local"], "apply to --shards"),
    (["--replicas", "2"], "apply to --shards"),
    (["--shards", "2", "--replicas", "0"], "--replicas 0 must be a positive"),
])
def test_serve_shard_option_errors(static_index, tmp_path, tiny_encoder_session, capsys, args, words):
    from uhdsearch.cli.main import main

    tiny_encoder_session.save_pretrained(tmp_path / "model")
    assert main(["serve", str(static_index), "--model", str(tmp_path / "model"), *args]) == 2
    assert words in capsys.readouterr().err


def test_a_segmented_index_is_served_sharded_by_its_live_documents(ray_cluster, tiny_encoder_session, mini_data,
                                                                   segmented_index, tmp_path):
    plain = SearchService.open(tiny_encoder_session, segmented_index, mini_data.corpus, writable=False)
    sharded = open_sharded_service(tiny_encoder_session, segmented_index, 2, None, tmp_path / "shards",
                                   mini_data.corpus)
    try:
        assert sharded.snapshot.index.n_documents == 375
        expected, got = _answers(plain, ks=(10, 400)), _answers(sharded, ks=(10, 400))
        assert got == expected
        deleted = list(mini_data.corpus)[::16]
        assert not {h[0] for a in got if isinstance(a, list) for h in a} & set(deleted)
    finally:
        sharded.snapshot.index.close()


def test_shards_of_a_segmented_index_are_rewritten_after_a_new_commit(segmented_index, tmp_path):
    from uhdsearch.index.inverted import InvertedIndex
    from uhdsearch.index.live.segments import SegmentedIndex

    shards = tmp_path / "shards"
    first = shard_dirs_for(segmented_index, 2, shards)
    stamps = [p.stat().st_mtime_ns for p in first]
    assert shard_dirs_for(segmented_index, 2, shards) == first
    assert [p.stat().st_mtime_ns for p in first] == stamps  # same commit: reused
    with SegmentedIndex.open(segmented_index, writable=True) as writer:
        assert writer.delete([next(d for d in writer.doc_ids if d is not None)]) == 1
        writer.commit()
    again = shard_dirs_for(segmented_index, 2, shards)
    assert sum(InvertedIndex.load(p).n_documents for p in again) == 374  # the new commit's live documents
