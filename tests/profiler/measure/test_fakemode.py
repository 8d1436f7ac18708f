"""FakeTensorMode without importing torch._dynamo: a prediction loads none of it, and the
real package still imports and works afterwards, in the same process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CODE = r"""
import sys
import torch
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.measure.fakemode import is_real_dynamo_loaded
from attnprof.profiler.records import Point, Shape

for mode in ("plain", "checkpoint", "reversible"):  # checkpoint's functions are wrapped by _disable_dynamo too
    predict(Point("sdpa", mode, "model", Shape(batch=1, seq_len=64, d_model=32, heads=2, layers=2)))
print("after predictions:", is_real_dynamo_loaded(), "torch._dynamo" in sys.modules,
      "torch._dynamo.config" in sys.modules)

from torch.utils.checkpoint import checkpoint
wrapped = [f for f in vars(torch.utils.checkpoint).values() if hasattr(f, "__wrapped__")]
print("cached passthroughs:", sum("__dynamo_disable" in vars(f.__wrapped__) for f in wrapped))

import torch._dynamo  # the real package, adopting the config module the stand-in loaded
print("real:", is_real_dynamo_loaded(), torch._dynamo.config is sys.modules["torch._dynamo.config"],
      callable(torch._dynamo.disable), hasattr(torch._dynamo, "optimize"))
predict(Point("sdpa", "checkpoint", "model", Shape(batch=1, seq_len=64, d_model=32, heads=2, layers=2)))
print("still predicts")
"""


@pytest.mark.slow
def test_predictions_do_not_import_dynamo_and_it_still_imports_after(tmp_path):
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True,
                         env={**os.environ, "ATTNPROF_CACHE_DIR": str(tmp_path)}).stdout.splitlines()
    assert out == ["after predictions: False False True", "cached passthroughs: 0", "real: True True True True",
                   "still predicts"]


def test_with_dynamo_already_imported_nothing_changes():
    import torch._dynamo

    from attnprof.profiler.measure.fakemode import light_dynamo

    before = sys.modules["torch._dynamo"]
    with light_dynamo():
        assert sys.modules["torch._dynamo"] is before
    assert sys.modules["torch._dynamo"] is before and torch._dynamo is before


EDGES_CODE = r"""
import torch
from attnprof.profiler.measure.fakemode import is_real_dynamo_loaded, light_dynamo

class Thing:
    pass

def f():
    return 1

with light_dynamo():
    assert torch._dynamo.disable(Thing) is Thing  # torch's disable takes classes too
    assert torch._disable_dynamo(f)() == 1  # caches the pass-through on f
    torch._dynamo.graph_break(msg="why")  # the real one takes a message
    with torch._dynamo.disable():  # and its disable() is a with block too
        assert torch._dynamo.disable(recursive=False)(f) is f
print("after:", is_real_dynamo_loaded(), "__dynamo_disable" in vars(f), "torch._dynamo" in __import__("sys").modules)
"""


def test_a_class_passed_through_and_a_graph_break_with_a_message_leave_cleanly(tmp_path):
    """Forms the worker's passes do not use today, but torch's own code may (a review's finding):
    leaving the stand-in raised AttributeError for a class (its __dict__ is a mappingproxy)."""
    out = subprocess.run([sys.executable, "-c", EDGES_CODE], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "ATTNPROF_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["after: False False False"]


# --- issue 24: optimizer -----------------------------------------------------------------
OPTIMIZER_CODE = r"""
import torch
from attnprof.profiler.predict import fake_run
from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.measure.fakemode import is_real_dynamo_loaded
from attnprof.profiler.records import Point, Shape

fake_run.SMALL_POINT_BYTES = 0  # fake tensors: torch.optim's 0-dim step tensors are real ones converted
for impl in ("foreach", "forloop"):  # torch.optim's step calls torch._dynamo.graph_break
    predict(Point("sdpa", "plain", "model", Shape(batch=1, seq_len=16, d_model=32, heads=2, layers=4,
                                                  optimizer="adamw", optimizer_impl=impl)))
print("after predictions:", is_real_dynamo_loaded())
import torch._dynamo  # the real package: the submodules a stand-in imported alone are out of its way
print("real:", is_real_dynamo_loaded(), callable(torch._dynamo.utils.dynamo_timed))
"""


@pytest.mark.slow
def test_an_optimizer_step_imports_no_dynamo_and_it_still_imports_after(tmp_path):
    out = subprocess.run([sys.executable, "-c", OPTIMIZER_CODE], capture_output=True, text=True, check=True,
                         env={**os.environ, "ATTNPROF_CACHE_DIR": str(tmp_path)}).stdout.splitlines()
    assert out == ["after predictions: False", "real: True True"]
