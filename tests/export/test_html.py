"""The HTML report, drawn by the real Graphviz and opened in a real headless Chromium.

The page is checked as a browser builds it (`chromium --headless --dump-dom`, after the page's
script ran): the SVG nodes of both views are there, the fused groups are clusters with their
names, a search selects the node and its counterpart in the other view, the script raised no
error. A screenshot of each page is saved (set AUTOFUSION_SCREENSHOTS=DIR to keep them).
Without Graphviz the drawing tests are skipped, without Chromium the browser tests, each saying
what to install; CI installs both (.ci/run).
"""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import onnx
import pytest
import torch
from torch import nn

import autofusion
from autofusion.cli import main
from autofusion.export.graphviz import GraphvizUnavailable
from tests.models.architectures import BertLayer, bert_layer, export

EXAMPLE = "examples/tiny_resnet.onnx"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's dot is not installed (apt-get install graphviz)")


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.skip("no headless browser: Chromium is not installed (apt-get install chromium)")


def browser(url: str, *args: str, size: str = "1400,1000") -> subprocess.CompletedProcess:
    flags = ["--headless", "--disable-gpu", "--hide-scrollbars", f"--window-size={size}",
             "--virtual-time-budget=10000"]
    if os.geteuid() == 0:
        flags.append("--no-sandbox")   # Chromium's sandbox refuses to run as root
    done = subprocess.run([chromium(), *flags, *args, url], capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


class SvgGroups(HTMLParser):
    """The <g> elements of the dumped DOM: id -> (classes, the text of its <text> children),
    and the attributes of <html>."""

    def __init__(self):
        super().__init__()
        self.groups: dict[str, tuple[set[str], str]] = {}
        self.root: dict[str, str] = {}
        self.found = ""
        self._open: list[str | None] = []   # ids of the open <g> elements
        self._in_text = False
        self._in_found = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "html":
            self.root = {k: v or "" for k, v in a.items()}
        elif tag == "g":
            gid = a.get("id")
            if gid:
                self.groups[gid] = (set((a.get("class") or "").split()), "")
            self._open.append(gid)
        elif tag == "text":
            self._in_text = True
        elif tag == "span" and a.get("id") == "af-found":
            self._in_found = True

    def handle_endtag(self, tag):
        if tag == "g" and self._open:
            self._open.pop()
        elif tag == "text":
            self._in_text = False
        elif tag == "span":
            self._in_found = False

    def handle_data(self, data):
        if self._in_found:
            self.found += data
        if self._in_text and self._open and self._open[-1]:
            gid = self._open[-1]
            classes, text = self.groups[gid]
            self.groups[gid] = (classes, (text + " " + data).strip())

    def with_class(self, cls: str, prefix: str = "") -> dict[str, str]:
        return {i: t for i, (c, t) in self.groups.items() if cls in c and i.startswith(prefix)}


def rendered(page: Path, fragment: str = "") -> SvgGroups:
    dom = SvgGroups()
    dom.feed(browser(page.resolve().as_uri() + fragment, "--dump-dom").stdout)
    assert dom.root.get("data-af-ready") == "yes", dom.root
    assert "data-af-error" not in dom.root, dom.root["data-af-error"]
    return dom


def screenshot(page: Path, out: Path, fragment: str = "", size: str = "1400,1000") -> Path:
    keep = os.environ.get("AUTOFUSION_SCREENSHOTS")
    if keep:
        out = Path(keep) / out.name
        out.parent.mkdir(parents=True, exist_ok=True)
    browser(page.resolve().as_uri() + fragment, f"--screenshot={out}", size=size)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    return out


def fused_nodes(model) -> list:
    return [n for n in model.graph.nodes if "rule" in n.meta]


def fused_groups(model) -> set[tuple[frozenset[str], str]]:
    """(names of the nodes one match made, its rule), as the clusters should be labelled."""
    made: dict[tuple, set[str]] = {}
    for n in fused_nodes(model):
        made.setdefault((n.meta["rule"], n.origin), set()).add(n.name)
    return {(frozenset(names), rule) for (rule, _), names in made.items()}


def cluster_groups(labels) -> set[tuple[frozenset[str], str]]:
    """The same read from the clusters' labels: "A + B (Rule)"."""
    out = set()
    for label in labels:
        names, _, rule = label.rpartition(" (")
        out.add((frozenset(names.split(" + ")), rule.rstrip(")")))
    return out


@needs_dot
def test_the_page_is_whole_and_fetches_nothing(tmp_path):
    model = autofusion.compile(EXAMPLE, backend="torch")
    page = autofusion.export_html(model, tmp_path / "report.html", original=EXAMPLE)
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert text.count("<svg") == 2 and "ConvBNReluFusionOp" in text
    # nothing to fetch: no external script, style sheet, image or font; only XML namespaces
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", text)
    assert not re.search(r"url\(", text)
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) <= {
        "http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}


def test_without_dot_the_error_says_to_install_graphviz_and_no_page_is_written(tmp_path, monkeypatch, capsys):
    model = autofusion.compile(EXAMPLE, backend="torch")
    monkeypatch.setenv("PATH", str(tmp_path))   # a PATH with no dot on it
    with pytest.raises(GraphvizUnavailable, match="install Graphviz.*apt-get install graphviz"):
        autofusion.export_html(model, tmp_path / "report.html", original=EXAMPLE)
    assert main(["compile", EXAMPLE, "--backend", "torch", "--html", str(tmp_path / "cli.html")]) == 2
    assert "apt-get install graphviz" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.html")) and not list(tmp_path.glob(".*"))


def test_the_original_graph_must_be_the_one_before_fusion(tmp_path):
    graph = autofusion.load(EXAMPLE)
    model = autofusion.compile(graph, backend="torch")   # fuses the Graph in place
    with pytest.raises(autofusion.AutofusionError, match="needs the graph before fusion"):
        autofusion.export_html(model, tmp_path / "report.html", original=graph)


@needs_dot
def test_tiny_resnet_renders_in_a_browser_with_its_fused_groups(tmp_path, capsys):
    page = tmp_path / "tiny_resnet.html"
    assert main(["compile", EXAMPLE, "--backend", "torch", "--html", str(page)]) == 0
    assert f"wrote {page}" in capsys.readouterr().out
    model = autofusion.compile(EXAMPLE, backend="torch")
    before = autofusion.load(EXAMPLE)
    dom = rendered(page)
    nodes_before, nodes_after = dom.with_class("node", "before-"), dom.with_class("node", "after-")
    assert len(nodes_before) == len(before) + 2 and len(nodes_after) == len(model.graph) + 2
    assert dom.root["data-af-boxes-before"] == str(len(nodes_before))
    assert "Conv float[1,16,64,64]" in nodes_before.values()
    groups = dom.with_class("af-group", "before-")
    fused = fused_nodes(model)
    assert len(groups) == len(fused) and cluster_groups(groups.values()) == fused_groups(model)
    assert sum("FusedConv" in t for t in nodes_after.values()) == 9
    screenshot(page, tmp_path / "tiny_resnet.png")


@needs_dot
def test_search_selects_a_node_and_its_fused_counterpart(tmp_path):
    model = autofusion.compile(EXAMPLE, backend="torch")
    page = autofusion.export_html(model, tmp_path / "report.html", original=EXAMPLE)
    dom = rendered(page, "#find=/3/Add")
    selected = dom.with_class("af-selected")
    peers = dom.with_class("af-peer")
    assert list(selected.values()) == ["Add float[1,16,64,64]"]
    assert list(peers.values()) == ["FusedConv float[1,16,64,64]"]   # the ConvAddRelu it joined
    assert dom.found.strip() == "1 / 2"   # the Add, and the fused node that stands for it


@needs_dot
def test_bert_layer_renders_with_attention_and_near_misses(tmp_path):
    onnx_model, _ = bert_layer()
    path = tmp_path / "bert_layer.onnx"
    onnx.save(onnx_model, path)
    model = autofusion.compile(path, backend="torch")
    page = autofusion.export_html(model, tmp_path / "bert_layer.html", original=path)
    dom = rendered(page)
    groups = dom.with_class("af-group", "before-")
    assert any("(AttentionFusionOp)" in t for t in groups.values())
    assert cluster_groups(groups.values()) == fused_groups(model)   # one cluster per match
    assert any(" + " in t for t in groups.values())   # attention: Attention + Transpose, one match
    assert dom.with_class("af-near-miss")
    assert len(dom.with_class("node", "after-")) >= len(model.graph)
    screenshot(page, tmp_path / "bert_layer.png")


class BertEncoder(nn.Module):
    """BERT's encoder at depth: `layers` of the CI's BertLayer, one embedding and one mask."""

    def __init__(self, layers: int):
        super().__init__()
        self.layers = nn.ModuleList(BertLayer() for _ in range(layers))

    def forward(self, input_ids, attention_mask):
        x = self.layers[0].embed(input_ids)
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            q, k, v = (layer._split(f(x)) for f in (layer.q, layer.k, layer.v))
            scores = q @ k.transpose(-1, -2) / math.sqrt(layer.dh) + mask
            ctx = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(x.shape)
            x = layer.ln1(x + layer.o(ctx))
            x = layer.ln2(x + layer.ff2(nn.functional.gelu(layer.ff1(x))))
        return x


@needs_dot
def test_a_bert_sized_graph_of_1300_nodes_renders_and_searches(tmp_path):
    torch.manual_seed(0)
    ids, mask = torch.randint(0, 100, (2, 16)), torch.ones(2, 16, dtype=torch.int64)
    dynamic = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    path = tmp_path / "bert16.onnx"
    onnx.save(export(BertEncoder(16), (ids, mask), ["input_ids", "attention_mask"], dynamic), path)
    model = autofusion.compile(path, backend="torch")
    assert model.report.ops_before == 1300
    page = autofusion.export_html(model, tmp_path / "bert16.html", original=path)
    dom = rendered(page, "#find=/v_7/MatMul")
    assert len(dom.with_class("node", "before-")) >= 1300
    assert cluster_groups(dom.with_class("af-group", "before-").values()) == fused_groups(model)
    assert list(dom.with_class("af-selected").values()) == ["MatMul float[batch,seq,64]"]
    assert [t for t in dom.with_class("af-peer").values()] == ["FusedMatMul float[batch,seq,64]"]
    screenshot(page, tmp_path / "bert16.png", "#find=/v_7/MatMul")
