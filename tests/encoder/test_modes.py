"""encoder/modes.py: a training model switched to eval mode for a pass, safely while other threads encode."""
import threading

from torch import nn

from uhdsearch.encoder.modes import evaluating


def test_a_second_thread_waits_while_a_training_module_is_switched():
    module = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))  # training mode, as nn.Module starts
    inside, release, entered = threading.Event(), threading.Event(), threading.Event()
    seen = []

    def first():
        with evaluating(module):
            inside.set()
            release.wait(5)

    def second():
        inside.wait(5)
        with evaluating(module):
            seen.append(module.training)
            entered.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    inside.wait(5)
    # the first pass holds the switch: the second may not run in the mode the first set for a moment
    assert not entered.wait(0.3) and module.training is False
    release.set()
    for t in threads:
        t.join(5)
    assert seen == [False] and module.training is True  # each pass ran in eval mode; training mode is back


def test_a_module_in_eval_mode_is_only_read():
    module = nn.Dropout(0.5).eval()
    with evaluating(module):
        with evaluating(module):  # no lock held for a module already in eval mode: nesting and threads run freely
            assert module.training is False
    assert module.training is False


def test_concurrent_encodes_of_a_training_model_equal_sequential_ones(tiny_encoder):
    tiny_encoder.train()  # as a model fresh from training, searched by a service or a dev check
    texts = ["cancer cells and tumour growth", "warm up and other words of a longer query text here"]
    want = [tiny_encoder.encode_query([t]).buckets[0].toarray() for t in texts]
    stop, wrong = threading.Event(), []

    def encode_other():
        while not stop.is_set():
            tiny_encoder.encode_query([texts[1]])

    other = threading.Thread(target=encode_other)
    other.start()
    try:
        for _ in range(150):
            got = tiny_encoder.encode_query([texts[0]]).buckets[0].toarray()
            wrong.append(not (got == want[0]).all())
    finally:
        stop.set()
        other.join(10)
    assert not any(wrong) and tiny_encoder.training
