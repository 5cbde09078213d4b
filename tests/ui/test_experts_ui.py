"""The expert heatmap on the page: a mixture of experts mapped once (then every criterion and keep choice without a
second pass), the slider and a click setting the edited slot to that expert pruning, the bytes said beforehand equal to
the built model's, and a dense model told in one line why it has none."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import pytest
import torch

from evaluation.serving.backend import Backend
from prune.core.architectures import decoder_layers
from prune.core.sizes import parameter_count
from ui.page.experts import DENSE
from ui.session import Session

from conftest import handlers_on, tiny_model, update_of
from tiny_architectures import tiny


@pytest.fixture
def backend():
    return Backend(data_dir="", device="cpu")


def visitor(page, backend, model, tokenizer, name: str):
    spec = backend.models.adopt(model, tokenizer, name=name)
    return handlers_on(page, backend), Session().for_model(spec, backend.models.load(spec))


def counted(model) -> list:
    """A list that grows by one at each forward pass of ``model``."""
    calls = []
    model.get_input_embeddings().register_forward_hook(lambda *_: calls.append(1))
    return calls


def test_a_dense_model_says_in_one_line_why_it_has_no_expert_map(page, backend, tiny_tokenizer):
    handlers, session = visitor(page, backend, tiny_model("llama"), tiny_tokenizer, "tiny-dense")
    box = page.cut.experts
    assert update_of(handlers.experts.opened(session), box.note) == DENSE
    with pytest.raises(gr.Error, match="This model is dense"):
        handlers.experts.map(session, "reap", False)


def test_the_map_then_the_slider_and_a_click_set_the_slot_with_the_bytes_of_the_built_model(page, backend,
                                                                                            tiny_tokenizer):
    model = tiny("qwen3_moe")  # 4 layers of 4 experts, 2 a token
    handlers, session = visitor(page, backend, model, tiny_tokenizer, "tiny-moe")
    box, experts = page.cut.experts, handlers.experts
    passes = counted(model)
    shown = experts.map(session, "reap", False)
    session = update_of(shown, page.session)
    found = session.experts
    assert len(passes) > 0 and found.layers == (0, 1, 2, 3) and found.experts == 4 and found.top_k == 2
    figure = update_of(shown, box.plot)
    assert len(figure.data[0].z) == 4 and len(figure.data[0].z[0]) == 4  # layers × experts
    assert update_of(shown, box.removed)["maximum"] == 3  # 90 % of 4, a whole number
    assert experts.map(session, "frequency", False)  # another criterion: no second pass
    before = len(passes)

    chosen = experts.choose(session, "reap", 2, False)
    session = update_of(chosen, page.session)
    step = session.cut().steps[0]
    assert step.kind == "experts" and step.method == "reap" and step.fraction == 0.5
    built = backend.models.model(session.spec, session.cut())
    assert len(passes) == before  # built from the map's pass
    assert [len(found.kept(0.5)[i]) for i in found.layers] == [2] * 4
    assert all(decoder_layers(built)[i].mlp.experts.gate_up_proj.shape[0] == 2 for i in found.layers)
    element = model.model.layers[0].mlp.experts.gate_up_proj.element_size()
    assert found.stored_bytes(0.5) == parameter_count(built) * element  # said before building = the built model
    line = update_of(chosen, box.line)
    assert line.startswith("**2 of 4 experts removed from each of 4 layers**") and "top-2" in line
    crossed = update_of(chosen, box.plot).data[1]
    assert len(crossed.x) == 8  # 2 experts × 4 layers marked removed

    scores = torch.tensor(found.scores[1])
    second_lowest = int(torch.sort(scores, stable=True).indices[1])
    clicked = experts.click(session, "reap", False, SimpleNamespace(x=second_lowest, y=1))
    assert update_of(clicked, page.session).cut().steps[0].fraction == 0.5  # it and the one below it
    ranked = experts.click(session, "reap", True, SimpleNamespace(x=0, y=3))  # sorted: the first column, 1 a layer
    assert update_of(ranked, page.session).cut().steps[0].fraction == 0.25
    assert update_of(experts.choose(session, "reap", 0, False), page.session).cut() is None  # 0: the slot empties
    with pytest.raises(gr.Error, match="The experts removed from each layer must be"):
        experts.choose(session, "reap", 4, False)


def test_the_expert_map_is_read_again_after_the_weights_change_in_place(page, backend, tiny_tokenizer):
    from prune.experts.saliency import expert_saliency

    model = tiny("mixtral")
    passes = counted(model)
    first = expert_saliency(model, tiny_tokenizer, "reap")
    expert_saliency(model, tiny_tokenizer, "ean")
    once = len(passes)
    with torch.no_grad():
        model.model.layers[0].mlp.experts.down_proj.mul_(2.0)  # an in-place change: the pass is stale
    again = expert_saliency(model, tiny_tokenizer, "reap")
    assert len(passes) > once and torch.allclose(again[0], 2 * first[0])  # its outputs' norms doubled
