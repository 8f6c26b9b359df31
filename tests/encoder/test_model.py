import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder, rows_to_csr
from uhdsearch.errors import ModelFormatError
from uhdsearch.sparse import SparseEncoding

TEXTS = ["Vitamin D deficiency is linked to bone loss.", "Protein folding in bacteria.", ""]


def _same(a, b):
    return all((x != y).nnz == 0 for x, y in zip(a.buckets, b.buckets))


def test_buckets_have_unit_norm_and_at_most_tokens_times_wta_k_dims(tiny_encoder):
    enc = tiny_encoder.encode_document(TEXTS, show_progress=False)
    assert enc.n_buckets == 2 and enc.n == 3 and enc.dim == 2048
    for m in enc.buckets:
        norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
        assert np.allclose(norms, 1.0, atol=1e-5)
        assert np.all(m.data > 0)
    n_tokens = [len(tiny_encoder.backbone.tokenizer(t)["input_ids"]) for t in TEXTS]
    assert np.all(enc.active_per_row()[:, 0] <= np.array(n_tokens) * 16)
    assert enc.active_per_row()[2, 0] > 0  # [CLS] [SEP] alone still activate winners


def test_batching_and_order_do_not_change_encodings(tiny_encoder):
    one = tiny_encoder.encode_document(TEXTS, batch_size=1, show_progress=False)
    many = tiny_encoder.encode_document(TEXTS[::-1], batch_size=3, show_progress=False)[[2, 1, 0]]
    alone = SparseEncoding.concat([tiny_encoder.encode_document([t], show_progress=False) for t in TEXTS])
    for other in (many, alone):
        for a, b in zip(one.buckets, other.buckets):
            assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
            assert np.allclose(a.toarray(), b.toarray(), atol=1e-5)


def test_dense_rows_become_the_same_csr_as_scipy_makes():
    rows = torch.zeros(4, 50)
    rows[0, [3, 7, 49]] = torch.tensor([0.5, 0.25, 1.0])
    rows[2, 0] = 2.0  # rows 1 and 3 stay empty
    got, want = rows_to_csr(rows), sp.csr_matrix(rows.numpy())
    assert got.shape == want.shape and got.has_sorted_indices
    assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
    assert np.array_equal(got.data, want.data)


def test_query_k_truncates_at_inference_without_retraining(tiny_encoder):
    full = tiny_encoder.encode(TEXTS[:2], "query")  # every active dimension
    top = tiny_encoder.encode_query(TEXTS[:2], query_k=10)
    assert np.all(top.active_per_row() == 10)
    for f, t in zip(full.buckets, top.buckets):
        for r in range(2):
            kept = t[r].toarray().ravel()
            row = f[r].toarray().ravel()
            assert set(np.flatnonzero(kept)) <= set(np.flatnonzero(row))
            assert kept[kept > 0].min() >= np.sort(row)[-10] - 1e-7


def test_wta_k_can_change_at_inference(tiny_encoder):
    small = tiny_encoder.encode_document(TEXTS[:1], wta_k=2, show_progress=False)
    large = tiny_encoder.encode_document(TEXTS[:1], show_progress=False)
    assert small.active_per_row()[0, 0] < large.active_per_row()[0, 0]


def test_save_then_load_gives_identical_encodings_and_digest(tiny_encoder, tmp_path):
    tiny_encoder.save_pretrained(tmp_path / "m")
    loaded = UHDEncoder.from_pretrained(tmp_path / "m")
    assert loaded.config == tiny_encoder.config
    assert loaded.digest() == tiny_encoder.digest()
    assert _same(loaded.encode_document(TEXTS, show_progress=False),
                 tiny_encoder.encode_document(TEXTS, show_progress=False))
    # The backbone is a standard Hugging Face model that transformers loads alone.
    from transformers import AutoModel

    hf = AutoModel.from_pretrained(tmp_path / "m")
    assert hf.config.hidden_size == 128
    meta = json.loads((tmp_path / "m" / "uhd_config.json").read_text())
    assert meta["format"] == "uhd-encoder" and meta["dim"] == 2048


def test_save_refuses_to_overwrite_and_leaves_no_temporary_files(tiny_encoder, tmp_path):
    tiny_encoder.save_pretrained(tmp_path / "m")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        tiny_encoder.save_pretrained(tmp_path / "m")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_load_time_overrides(tiny_encoder, tmp_path):
    tiny_encoder.save_pretrained(tmp_path / "m")
    loaded = UHDEncoder.from_pretrained(tmp_path / "m", wta_k=4, query_k=7)
    assert loaded.config.wta_k == 4 and loaded.config.query_k == 7
    with pytest.raises(TypeError, match="cannot override \\['dim'\\]"):
        UHDEncoder.from_pretrained(tmp_path / "m", dim=10)


def test_the_digest_does_not_depend_on_the_uhdsearch_version(tiny_encoder, monkeypatch):
    """Indexes record their encoder's digest: a new release loading the same weights must not look like a swap."""
    import uhdsearch.encoder.config as config_module

    tiny_encoder._digest = None
    before = tiny_encoder.digest()
    monkeypatch.setattr(config_module, "__version__", "99.0.0")
    tiny_encoder._digest = None
    assert tiny_encoder.config.to_json()["uhdsearch_version"] == "99.0.0"
    assert tiny_encoder.digest() == before


def test_training_changes_the_digest(tiny_encoder):
    before = tiny_encoder.digest()
    with torch.no_grad():
        tiny_encoder.buckets.wta["1"].bias += 1.0
    tiny_encoder.train()
    assert tiny_encoder.digest() != before


@pytest.mark.parametrize("damage, message", [
    ("no_config", "has no uhd_config.json"),
    ("bad_json", "is not valid JSON"),
    ("foreign", "format is 'something-else'"),
    ("newer", "format_version 99 is newer"),
    ("no_wta", "has no wta.safetensors"),
    ("corrupt_wta", "not a readable safetensors file"),
])
def test_broken_model_directories_give_clear_errors(tiny_encoder, tmp_path, damage, message):
    d = tmp_path / "m"
    tiny_encoder.save_pretrained(d)
    cfg = d / "uhd_config.json"
    if damage == "no_config":
        cfg.unlink()
    elif damage == "bad_json":
        cfg.write_text("{not json")
    elif damage in ("foreign", "newer"):
        meta = json.loads(cfg.read_text())
        meta.update({"format": "something-else"} if damage == "foreign" else {"format_version": 99})
        cfg.write_text(json.dumps(meta))
    elif damage == "no_wta":
        (d / "wta.safetensors").unlink()
    else:
        (d / "wta.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(ModelFormatError, match=message):
        UHDEncoder.from_pretrained(d)


def test_missing_model_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="no model directory"):
        UHDEncoder.from_pretrained(tmp_path / "nope")


@pytest.mark.parametrize("kwargs, message", [
    ({"wta_k": 0}, "wta_k=0 must satisfy"),
    ({"dim": 10, "wta_k": 11}, "wta_k=11 must satisfy"),
    ({"bucket_layers": (1, 2), "bucket_weights": (1.0,)}, "one weight per bucket layer"),
    ({"bucket_layers": ()}, "at least one"),
    ({"bucket_layers": (2, 2)}, "duplicates"),
    ({"weight_sparsity": 1.0}, "weight_sparsity"),
    ({"query_k": 0}, "query_k=0"),
    ({"wta_dtype": "float16"}, "wta_dtype"),
])
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EncoderConfig(**kwargs)


def test_layer_outside_the_backbone_is_rejected(tiny_backbone_dir):
    with pytest.raises(ValueError, match="layer 5 does not exist: the backbone has layers 0 \\(embeddings\\) to 2"):
        UHDEncoder.new(tiny_backbone_dir, EncoderConfig(dim=64, wta_k=4, query_k=None, bucket_layers=(5,)))


def test_cached_states_give_nearly_the_same_buckets_as_direct_encoding(tiny_encoder):
    direct = tiny_encoder.encode_document(TEXTS[:2], show_progress=False)
    states = tiny_encoder.token_states(TEXTS[:2], "document", show_progress=False)
    cached = tiny_encoder.encode_states(states, show_progress=False)
    for a, b in zip(direct.buckets, cached.buckets):
        for r in range(2):
            sa, sb = set(a[r].indices), set(b[r].indices)
            assert len(sa & sb) / len(sa | sb) > 0.9  # states are cached in bfloat16


def test_backbone_without_safetensors_is_refused_not_unpickled(tmp_path, tiny_backbone_dir):
    import shutil

    from uhdsearch.encoder.backbone import Backbone

    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_backbone_dir / name, tmp_path / name)
    (tmp_path / "pytorch_model.bin").write_bytes(b"not to be unpickled")
    with pytest.raises(ModelFormatError, match="has no .safetensors weights"):
        Backbone.from_pretrained(tmp_path)


def test_config_that_is_not_an_object_or_has_bad_values(tiny_encoder, tmp_path):
    d = tmp_path / "m"
    tiny_encoder.save_pretrained(d)
    (d / "uhd_config.json").write_text("[1, 2]")
    with pytest.raises(ModelFormatError, match="expected a JSON object"):
        UHDEncoder.from_pretrained(d)
    meta = tiny_encoder.config.to_json() | {"wta_k": -3}
    (d / "uhd_config.json").write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError, match="invalid settings: wta_k=-3"):
        UHDEncoder.from_pretrained(d)
