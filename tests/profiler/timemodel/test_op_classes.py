"""The kernel classifier: every op attnprof's variants run has a class someone chose."""

import pytest

from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import MODES, Point, Shape
from attnprof.scenarios.plan import shape_problem
from attnprof.profiler.timemodel.op_classes import CLASSES, DEFAULT_CLASS, is_known, kernel_class
from attnprof.scenarios.variants.registry import variant_names


def _ops_of_every_builtin_point() -> set:
    names = set()
    for variant in variant_names():
        for scope, modes in (("model", MODES), ("attention", ("none",))):
            for mode in modes:
                point = Point(variant, mode, scope, Shape(seq_len=256, d_model=64, heads=2, layers=2))
                if shape_problem(point) is None:
                    names |= {row[1] for row in predict(point).op_costs}
    return names


def test_every_op_of_every_builtin_variant_and_mode_is_classified():
    names = _ops_of_every_builtin_point()
    assert "mm.default" in names and len(names) > 30
    unknown = sorted(str(n) for n in names if not is_known(n))
    assert unknown == [], f"ops with no class of their own (costed as {DEFAULT_CLASS}): {unknown}"
    assert {kernel_class(n) for n in names} <= set(CLASSES)


@pytest.mark.parametrize("op, cls", [
    ("mm.default", "gemm"), ("bmm.default", "gemm"), ("addmm.default", "gemm"), (None, "gemm"),
    ("_scaled_dot_product_flash_attention_for_cpu.default", "attention"),
    ("_scaled_dot_product_flash_attention_for_cpu_backward.default", "attention"),
    ("add.Tensor", "elementwise"), ("masked_fill_.Scalar", "elementwise"), ("gelu_backward.default", "elementwise"),
    ("_softmax.default", "reduction"), ("native_layer_norm_backward.default", "reduction"),
    ("sum.dim_IntList", "reduction"), ("sort.default", "gather_scatter_sort"), ("gather.default", "gather_scatter_sort"),
    ("scatter_add.default", "gather_scatter_sort"), ("clone.default", "copy"), ("cat.default", "copy"),
    ("copy_.default", "copy"), ("slice_backward.default", "copy"),
    ("_unsafe_view.default", "view"), ("detach.default", "view"), ("t.default", "view"), ("expand.default", "view"),
    ("as_strided.default", "view"), ("lift_fresh.default", "view"), ("alias.default", "view"),
    ("new_empty_strided.default", "view"),
])
def test_classes(op, cls):
    assert kernel_class(op) == cls


def test_an_unknown_op_is_costed_as_elementwise_and_says_it_is_unknown():
    assert kernel_class("some_new_op.default") == "elementwise"
    assert not is_known("some_new_op.default") and is_known("add.Tensor")


def test_the_optimizer_steps_ops_have_a_class():
    """issue 24: a foreach op is its per-tensor op's class; a fused optimizer one elementwise kernel."""
    assert kernel_class("_foreach_sqrt.default") == "elementwise"
    assert kernel_class("_foreach_addcdiv_.ScalarList") == "elementwise"
    assert kernel_class("_foreach_norm.Scalar") == "reduction"
    assert kernel_class("_fused_adamw_.default") == "elementwise"
    assert kernel_class("_record_function_enter_new.default") == "view"
    assert all(is_known(n) for n in ("_foreach_lerp_.Scalar", "_fused_sgd_.default", "_foreach_add_.Tensor"))
