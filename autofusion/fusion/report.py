"""The fusion report: what fused, how often, into what, what it should buy, what did not fuse.

One set of facts, three forms: `text()` in the spirit of the original's "Graph Fusion Report",
`to_json()` for tools, and the HTML page in export/. Estimates come from the cost model and are
labelled as estimates; a measured speedup, when one was taken, is labelled as measured.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace


@dataclass
class RuleReport:
    name: str                  # public fused-op name (the disable-list name)
    level: int
    description: str
    pattern: str               # e.g. "Conv+BatchNormalization+Relu?"
    matched: int
    fused_into: list[str]      # op types the replacement produced
    est_speedup: float | None  # of the matched subgraphs, by the cost model
    inside: dict[str, int] = field(default_factory=dict)   # of `matched`, inside bodies: where -> n


NEAR_MISSES_SHOWN = 3   # per rule, in the text report


@dataclass
class NearMissReport:
    rule: str
    nodes: list[str]
    reason: str
    where: str = ""            # "" in the main graph, else the body ("Loop 'loop' body")


@dataclass
class RegionReport:
    name: str                  # the Region node
    kernel: str                # named after its ops: fused_sigmoid_mul
    ops: list[str]             # its ops' types, in order
    nodes: list[str]           # the nodes it stands for
    where: str = ""            # "" in the main graph, else the body ("Loop 'loop' body")


@dataclass
class NotFusedReport:
    node: str
    op: str
    code: str                  # reason code (fusion/regions.py REASONS)
    reason: str
    where: str = ""            # "" in the main graph, else the body ("Loop 'loop' body")


REGIONS_SHOWN = 5              # kernels listed in the text report
NOT_FUSED_SHOWN = 2            # examples per reason code


@dataclass
class FusionReport:
    model: str
    level: int
    disabled: list[str]
    ops_before: int
    ops_after: int
    histogram_before: dict[str, int]
    histogram_after: dict[str, int]
    rules: list[RuleReport] = field(default_factory=list)
    passes: dict[str, int] = field(default_factory=dict)   # clean-up pass -> changes
    near_misses: list[NearMissReport] = field(default_factory=list)
    est_seconds_before: float = 0.0
    est_seconds_after: float = 0.0
    measured: dict | None = None   # {"level0_ms", "fused_ms", "speedup", "runs"} when measured
    backend: str = ""              # one line from the backend: what runs the fused graph
    regions: list[RegionReport] = field(default_factory=list)         # automatic fusion
    not_auto_fused: list[NotFusedReport] = field(default_factory=list)
    precision: dict | None = None  # from the backend: what computed in which format, the guard
    onnx_runtime: dict[str, int] = field(default_factory=dict)   # op -> nodes ONNX Runtime runs

    @property
    def est_speedup(self) -> float:
        return self.est_seconds_before / self.est_seconds_after if self.est_seconds_after else 1.0

    def add_body(self, where: str, body: FusionReport) -> None:
        """Count what fused in a subgraph body (an If branch, a Loop or Scan body) here, each
        fact saying where; a body's own bodies are under it ("If 'if' then_branch > Loop ...")."""
        def inner(w: str) -> str:
            return where + (f" > {w}" if w else "")
        mine = {r.name: r for r in self.rules}
        for r in body.rules:
            if not r.matched:
                continue
            if r.name not in mine:
                mine[r.name] = RuleReport(r.name, r.level, r.description, r.pattern, 0, [], None)
                self.rules.append(mine[r.name])
            ours = mine[r.name]
            ours.matched += r.matched
            ours.fused_into = sorted(set(ours.fused_into) | set(r.fused_into))
            direct = r.matched - sum(r.inside.values())
            for w, n in ([("", direct)] if direct else []) + list(r.inside.items()):
                ours.inside[inner(w)] = ours.inside.get(inner(w), 0) + n
        for items in (self.near_misses, body.near_misses), (self.regions, body.regions), \
                (self.not_auto_fused, body.not_auto_fused):
            ours, theirs = items
            ours.extend(replace(x, where=inner(x.where)) for x in theirs)
        for k, n in body.passes.items():
            self.passes[k] = self.passes.get(k, 0) + n

    def to_json(self) -> dict:
        d = asdict(self)
        d["est_speedup"] = round(self.est_speedup, 3)
        return d

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    def text(self) -> str:
        lines = [f"Graph Fusion Report — {self.model} (level {self.level}"
                 + (f", disabled: {', '.join(self.disabled)}" if self.disabled else "") + ")",
                 "=" * 60]
        for r in sorted(self.rules, key=lambda r: -r.matched):
            if not r.matched:
                continue
            inside = "".join(f", {n} in {w}" for w, n in r.inside.items())
            lines += [f"Pattern: {r.pattern}",
                      f"  Matched: {r.matched} time{'s' if r.matched != 1 else ''}"
                      + (f" ({inside[2:]})" if inside else ""),
                      f"  Fused into: {r.name} ({', '.join(r.fused_into) or 'removed'})"]
            if r.est_speedup is not None:
                lines.append(f"  Estimated speedup: {r.est_speedup:.2f}x")
            lines.append("")
        if not any(r.matched for r in self.rules):
            lines += ["No fusion rule matched.", ""]
        lines += self._regions_text()
        done = {k: v for k, v in self.passes.items() if v}
        if done:
            lines.append("Clean-up: " + ", ".join(f"{k} {v}" for k, v in done.items()))
        lines += [f"Total operators before fusion: {self.ops_before}",
                  f"Total operators after fusion: {self.ops_after}",
                  f"Overall speedup: {self.est_speedup:.2f}x (estimated by the cost model)"]
        if self.measured:
            m = self.measured
            lines.append(f"Measured speedup: {m['speedup']:.2f}x ({m['level0_ms']:.2f} ms -> "
                         f"{m['fused_ms']:.2f} ms, median of {m['runs']} runs)")
        if self.backend:
            lines.append(self.backend)
        if self.onnx_runtime:   # ops without a kernel here (strict=True refuses them instead)
            lines.append("Runs on ONNX Runtime: "
                         + ", ".join(f"{op} ×{k}" for op, k in self.onnx_runtime.items()))
        lines += self._precision_text()
        if self.near_misses:
            lines += ["", f"Not fused ({len(self.near_misses)}):"]
            by_rule: dict[str, list[NearMissReport]] = {}
            for nm in self.near_misses:
                by_rule.setdefault(nm.rule, []).append(nm)
            for rule, misses in by_rule.items():   # a 12-layer model repeats each reason 12 times
                lines += [f"  {rule}: {nm.reason}{_where_text([nm.where])}" for nm in misses[:NEAR_MISSES_SHOWN]]
                if len(misses) > NEAR_MISSES_SHOWN:
                    lines.append(f"  {rule}: … and {len(misses) - NEAR_MISSES_SHOWN} more like these "
                                 "(every one is in the JSON report)")
        return "\n".join(lines)

    def _regions_text(self) -> list[str]:
        if not self.regions and not self.not_auto_fused:
            return []
        ops = sum(len(r.ops) for r in self.regions)
        lines = [f"Auto-fused: {ops} ops into {len(self.regions)} kernel"
                 f"{'s' if len(self.regions) != 1 else ''}"]
        by_kernel: dict[str, list[RegionReport]] = {}
        for r in self.regions:
            by_kernel.setdefault(r.kernel, []).append(r)
        for kernel, rs in sorted(by_kernel.items(), key=lambda kv: -len(kv[1]))[:REGIONS_SHOWN]:
            sizes = sorted({len(r.ops) for r in rs})
            lines.append(f"  {kernel} ×{len(rs)} ({'-'.join(map(str, sizes[::max(1, len(sizes) - 1)]))} "
                         f"ops): {' '.join(rs[0].ops[:8])}{' …' if len(rs[0].ops) > 8 else ''}"
                         + _where_text(r.where for r in rs))
        if len(by_kernel) > REGIONS_SHOWN:
            lines.append(f"  … and {len(by_kernel) - REGIONS_SHOWN} more kinds (every region is in "
                         "the JSON report)")
        if self.not_auto_fused:
            by_code: dict[str, list[NotFusedReport]] = {}
            for nf in self.not_auto_fused:
                by_code.setdefault(nf.code, []).append(nf)
            lines.append(f"  Not auto-fused ({len(self.not_auto_fused)}):")
            for code, misses in by_code.items():
                names = ", ".join(f"{m.op} {m.node!r}" for m in misses[:NOT_FUSED_SHOWN])
                more = f" and {len(misses) - NOT_FUSED_SHOWN} more" if len(misses) > NOT_FUSED_SHOWN else ""
                lines.append(f"    [{code}] {misses[0].reason}: {names}{more}")
        return lines + [""]

    def _precision_text(self) -> list[str]:
        p = self.precision
        if not p or p["requested"] == "fp32":
            return []
        reduced = sum(1 for v in p["nodes"].values() if v == "bf16")
        lines = [f"Precision: {p['requested']} asked, {p['compute']} computed"
                 + (f" ({p['note']})" if p["note"] else "")]
        if "int8" in p:
            q = p["int8"]
            kept = [c for c in q["checked"] if c["kept_float"]]
            int8 = sum(1 for v in p["nodes"].values() if v == "int8")
            lines.append(f"  {int8} node(s) in int8, {q['tensors']} activation(s) quantized to uint8 "
                         f"({q['method']} ranges over {q['sets']} {q['calibration']} calibration input set(s))"
                         + (f"; {q['folded']} BatchNormalization(s) folded into their convolutions first"
                            if q.get("folded") else "")
                         + ("; random inputs calibrate random ranges: give real ones (calibration=, --calibrate)"
                            if q["calibration"] == "random" else ""))
            lines.append(f"  int8 guard (tolerance {q['tolerance']:.1e}, relative RMS error): "
                         f"{len(q['checked'])} convolution(s) and product(s) checked, {len(kept)} kept in float")
            lines += [f"    {c['op']} {c['node']!r}: int8 error {c['error']:.2e}" for c in kept]
        if "checked" in p and (p["checked"] or "int8" not in p):   # int8 with nothing left in float: no bf16 lines
            kept = [c for c in p["checked"] if c["kept_fp32"]]
            lines.append(f"  {reduced} convolution(s) and product(s) in bf16 with fp32 accumulation; "
                         f"the rest in fp32")
            lines.append(f"  Precision guard ({p['calibration']} calibration inputs, tolerance "
                         f"{p['tolerance']:.1e} of each output's largest magnitude): "
                         f"{len(p['checked'])} checked, {len(kept)} kept in fp32")
            lines += [f"    {c['op']} {c['node']!r}: bf16 error {c['error_reduced']:.2e} -> fp32 "
                      f"{c['error_fp32']:.2e}" for c in kept]
        if "end_to_end" in p:
            lines.append("  End-to-end error against fp32 on the calibration inputs: "
                         + ", ".join(f"{k} {e:.2e}" if isinstance(e, float) else f"{k} not comparable ({e})"
                                     for k, e in p["end_to_end"].items()))
        return lines

    def __str__(self) -> str:
        return self.text()


def _where_text(wheres) -> str:
    """" (in Loop 'loop' body)" for the facts from bodies; nothing for the main graph's."""
    named = sorted(set(filter(None, wheres)))
    return f" (in {', '.join(named)})" if named else ""
