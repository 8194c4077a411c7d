"""The two views of the HTML report as data: clusters per fused group, colours per rule,
near-misses, stubs for widely read nodes, peers between the views. Pure Python: no Graphviz."""
from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

import autofusion
from autofusion.export.dot import dot_source
from autofusion.export.graph_views import (
    NEAR_MISS_BORDER,
    READERS_DRAWN_AS_STUBS,
    graph_views,
    rule_colours,
)
from tests.models.architectures import bert_layer

EXAMPLE = "examples/tiny_resnet.onnx"


def views(model, backend="torch"):
    compiled = autofusion.compile(model, backend=backend)
    before = autofusion.load(model)
    return before, compiled, *graph_views(before, compiled.graph, compiled.report, compiled.plan)


def test_each_fused_node_is_a_cluster_of_its_onnx_nodes_in_its_rules_colour():
    before, compiled, bv, av, colours = views(EXAMPLE)
    fused = [n for n in compiled.graph.nodes if "rule" in n.meta]
    assert len(fused) == 10 and len(bv.drawing.clusters) == len(fused)
    names = {b.id: b.name for b in bv.drawing.boxes}
    fill = {b.id: b.fill for b in bv.drawing.boxes}
    clusters = {c.label: c for c in bv.drawing.clusters}
    for node in fused:
        cluster = clusters[f"{node.name} ({node.meta['rule']})"]   # one node per match here
        assert [names[i] for i in cluster.box_ids] == list(node.origin)
        assert {fill[i] for i in cluster.box_ids} == {colours[node.meta["rule"]][0]}
    # every imported node and every graph input/output is drawn once, constants are not
    assert len(bv.drawing.boxes) == len(before) + len(before.inputs) + len(before.outputs)
    assert len(av.drawing.boxes) == len(compiled.graph) + 2


def test_details_link_the_views_and_say_what_became_of_each_node():
    _, _, bv, av, _ = views(EXAMPLE)
    conv = next(i for i, f in bv.details.items() if f["name"] == "/0/Conv")
    facts = bv.details[conv]
    assert facts["op"] == "Conv" and facts["fate"] == ("fused by ConvBNReluFusionOp into "
                                                         "'/0/Conv_1' (autofusion::FusedConv)")
    assert facts["outputs"][0][1] == "float[1,16,64,64]"
    assert "kernel_shape" in facts["attrs"]
    fused = av.details[facts["peers"][0]]
    assert fused["name"] == "/0/Conv_1" and fused["rule"] == "ConvBNReluFusionOp"
    assert fused["origin"] == ["/0/Conv", "/1/BatchNormalization", "/2/Relu"]
    assert conv in fused["peers"]
    assert fused["runs"].startswith("PyTorch via ")


def test_rule_colours_follow_the_report_most_matches_first():
    compiled = autofusion.compile(EXAMPLE, backend="torch")
    order = list(rule_colours(compiled.report, compiled.graph))
    assert order[:4] == ["ConvBNReluFusionOp", "ConvAddReluFusionOp", "ConvBNFusionOp", "PoolGemmFusionOp"]
    assert len(set(rule_colours(compiled.report, compiled.graph).values())) == len(order)


def test_near_misses_are_marked_with_their_reasons():
    model, _ = bert_layer()
    _, compiled, _, av, _ = views(model)
    assert compiled.report.near_misses
    miss = compiled.report.near_misses[0]
    marked = {f["name"]: (i, f) for i, f in av.details.items() if "near_misses" in f}
    assert any(n in marked for n in miss.nodes)
    name = next(n for n in miss.nodes if n in marked)
    box_id, facts = marked[name]
    assert f"{miss.rule}: {miss.reason}" in facts["near_misses"]
    box = next(b for b in av.drawing.boxes if b.id == box_id)
    assert box.border == NEAR_MISS_BORDER and "af-near-miss" in box.classes


def test_a_node_read_by_many_is_drawn_as_a_stub_at_each_reader():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="shared")]
    outs = []
    for i in range(READERS_DRAWN_AS_STUBS):
        nodes.append(helper.make_node("Neg", ["r"], [f"y{i}"], name=f"reader{i}"))
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [4]))
    model = helper.make_model(helper.make_graph(nodes, "fan", [x], outs),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    _, _, bv, _, _ = views(model)
    shared = next(i for i, f in bv.details.items() if f.get("name") == "shared")
    stubs = [b for b in bv.drawing.boxes if "af-stub" in b.classes]
    assert len(stubs) == READERS_DRAWN_AS_STUBS
    assert all(bv.details[s.id] == {"stub_of": shared} for s in stubs)
    assert not [a for a in bv.drawing.arrows if a[0] == shared]
    assert bv.details[shared]["readers"] == READERS_DRAWN_AS_STUBS


def test_dot_source_quotes_names():
    x = helper.make_tensor_value_info('in "x"\\', TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ['in "x"\\'], ["y"], name='odd "name" \\N')], "q", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17)])
    _, _, bv, _, _ = views(model)
    text = dot_source(bv.drawing)
    assert '"odd \\"name\\" \\\\N"' in text and '"input in \\"x\\"\\\\"' in text


def test_native_partitions_are_dashed_clusters_of_the_fused_graph():
    compiled = autofusion.compile(EXAMPLE, backend="auto")
    native = [p for p in compiled.plan.partitions if p.target == "native"]
    if not native:
        pytest.skip(f"no native code on this machine: {compiled.native_unavailable}")
    _, av, _ = graph_views(autofusion.load(EXAMPLE), compiled.graph, compiled.report, compiled.plan)
    clusters = [c for c in av.drawing.clusters if "af-partition" in c.classes]
    assert [c.label for c in clusters] == [f"native partition {p.index} ({len(p.nodes)} nodes)" for p in native]
    assert all(c.dashed for c in clusters)
    assert all(av.details[i]["runs"].startswith(f"native partition {native[0].index} via ")
               for i in clusters[0].box_ids)
