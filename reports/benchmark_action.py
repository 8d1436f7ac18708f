"""A run's figures as github-action-benchmark's ``customSmallerIsBetter`` input, so a project
that already keeps its benchmark history in that action keeps attnprof's memory there too.

The format (the action's ``src/extract.ts``, ``BenchmarkResult``): a JSON array of objects
with ``name`` (string), ``unit`` (string) and ``value`` (number), and optional ``range``
and ``extra`` (strings, shown in the chart's tooltip). The action matches entries across
commits by ``name`` alone, so a name must be stable (the same point gets the same name in
every run, whatever else the run holds) and unique within the file: it is the point's
whole identity (``point_name``), then the figure.

One entry per ``ok`` point and memory figure it has (unit ``bytes``): the measured peak,
the fake-tensor prediction, the CUDA allocator's reserved peak, and the GPU memory
model's allocated and reserved peaks; and the step time (unit ``ms``) where it was
measured. Other statuses have no figure to track and are left out.
"""

from __future__ import annotations

from attnprof.profiler.gate.snapshot import point_label
from attnprof.profiler.records import PointRecord, step_time_ms
from attnprof.profiler.units import fmt_ms, printable, strict_json

# Shape fields every name carries (point_label has variant, mode, length, batch and the later
# fields), and those it carries only away from their default, so today's names stay short.
ALWAYS = ("d_model", "heads", "layers", "dtype")
UNLESS_DEFAULT = {"ff_mult": PointRecord.ff_mult, "ff_chunks": PointRecord.ff_chunks}

# (record field, what the name calls it, the tooltip's words)
MEMORY_FIGURES = (
    ("measured_peak_bytes", "peak memory", "measured by {measured_by}"),
    ("predicted_peak_bytes", "predicted peak memory", "fake-tensor prediction"),
    ("cuda_reserved_peak_bytes", "reserved peak memory", "CUDA caching allocator, max reserved"),
    ("gpu_allocated_peak_bytes", "GPU model {gpu} allocated peak", "attnprof's GPU memory model (predicted)"),
    ("gpu_reserved_peak_bytes", "GPU model {gpu} reserved peak", "attnprof's GPU memory model (predicted)"),
)


def point_name(record: dict) -> str:
    """The point's stable, unique name: 'sdpa plain n=1024 d_model=64 heads=4 layers=2 float32',
    plus ff_mult / ff_chunks where not the default, and the device where it is not the CPU.
    Control characters of a label from the file are spelled out (``units.printable``)."""
    words = [point_label(record)]
    words += [f"{f}={record.get(f)}" for f in ALWAYS if f != "dtype"] + [str(record.get("dtype"))]
    words += [f"{f}={record.get(f)}" for f, default in UNLESS_DEFAULT.items()
              if record.get(f, default) != default]
    if record.get("device") not in (None, "", "cpu"):
        words.append(f"on {record.get('device')}")
    return printable(" ".join(words))


def _ms(value) -> str:
    return fmt_ms(value)  # the one way a time is printed (units.py), as the gate and the report show it


def entries(records: list[dict]) -> list[dict]:
    """The action's entries for these (valid) records, in record order."""
    out, seen = [], {}
    for r in records:
        if r.get("status") != "ok":
            continue
        base = point_name(r)
        for field, what, extra in MEMORY_FIGURES:
            value = r.get(field)
            if value is not None:
                words = {"gpu": printable(r.get("gpu") or "?"), "measured_by": printable(r.get("measured_by") or "?")}
                out.append({"name": f"{base}: {what.format(**words)}", "unit": "bytes", "value": int(value),
                            "extra": extra.format(**words)})
        step = step_time_ms(r.get("time_fwd_ms"), r.get("time_bwd_ms"))
        if step is not None:
            out.append(_time_entry(base, r, step))
    for entry in out:  # distinct identities whose printable names coincide: never merged silently
        count = seen[entry["name"]] = seen.get(entry["name"], 0) + 1
        if count > 1:
            entry["name"] += f" (#{count})"
    return out


def _time_entry(base: str, r: dict, step: float) -> dict:
    parts = [f"forward {_ms(r['time_fwd_ms'])}"]
    if r.get("time_bwd_ms") is not None:
        parts.append(f"backward {_ms(r['time_bwd_ms'])}")
    parts.append(f"median of {r.get('repeats')} on {printable(r.get('device_name') or r.get('device') or '?')}")
    entry = {"name": f"{base}: step time", "unit": "ms", "value": float(step), "extra": ", ".join(parts)}
    iqrs = [r.get("time_fwd_iqr_ms"), r.get("time_bwd_iqr_ms")]
    if any(i is not None for i in iqrs):
        entry["range"] = "IQR " + " + ".join(_ms(i) for i in iqrs if i is not None)
    return entry


def to_benchmark_action(records: list[dict]) -> bytes:
    """The entries as the JSON file the action reads (ASCII, control characters escaped)."""
    return (strict_json(entries(records), indent=1, ensure_ascii=True) + "\n").encode("ascii")
