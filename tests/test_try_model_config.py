"""The "Try the model" page's model settings: `site/try/transformer.js` reads the manifest's whole
ModelConfig, computes every setting it implements as chapter 2's Python does, and refuses the rest
with one line on the page.

- Every field of chapter 2's ModelConfig is one the JavaScript knows (its SETTINGS), with the
  Python's default, and it knows no other; the exported model's settings read as the Python's.
- Small random models of every setting the JavaScript implements (post-norm and pre-norm, d_v
  apart from d_k, learned positions, shared, tied and untied embeddings), exported as the page
  reads them: the JavaScript's logits are the Python's, a pass at once or a position at a time
  through chapter 6's cache, and its greedy and beam searches find what chapter 6's do.
- The page given a manifest of a setting it does not implement says so in one line, naming the
  setting and its value and what to do, and translates nothing.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import pytest
import torch
from test_site import (
    DESKTOP,
)

from annotated.ch01_attention import subsequent_mask
from annotated.ch02_model import ModelConfig, make_model
from annotated.ch03_training import SpecialTokens
from annotated.ch06_decoding import beam_search, greedy_decode_cached
from annotated.export import browser_model
from annotated.training.shipped import SHIPPED_DIR

ROOT = Path(__file__).resolve().parent.parent
TRY = ROOT / "site" / "try"
SPECIALS = {"pad": 1, "bos": 2, "eos": 3, "unk": 0}
REFUSED = "This page cannot run this model: "
WHAT_TO_DO = "Export a model with settings the page supports (make try-model)"


@pytest.fixture(scope="module")
def js(browser):  # noqa: F811
    """A blank page with transformer.js loaded: window.AnnotatedTransformer."""
    context = browser.new_context()
    page = context.new_page()
    page.add_script_tag(path=str(TRY / "transformer.js"))
    yield page
    context.close()


# --- the settings the JavaScript knows ----------------------------------------------------------


def test_every_modelconfig_field_is_a_setting_the_page_knows_with_the_pythons_default(js):
    settings = js.evaluate("() => AnnotatedTransformer.SETTINGS")
    fields = {field.name: field for field in dataclasses.fields(ModelConfig)}
    missing, stale = sorted(set(fields) - set(settings)), sorted(set(settings) - set(fields))
    assert not missing and not stale, (
        "site/try/transformer.js's SETTINGS must list exactly ModelConfig's fields: "
        f"missing {missing}, stale {stale}"
    )
    for name, field in fields.items():
        python = None if field.default is dataclasses.MISSING else field.default
        assert settings[name]["default"] == python, name


def test_the_exported_models_settings_read_as_the_pythons(js):
    manifest = json.loads((SHIPPED_DIR / "model.json").read_text(encoding="utf-8"))
    read = js.evaluate("(m) => AnnotatedTransformer.modelConfig(m)", manifest)
    settings = {k: v for k, v in manifest["model"].items() if k != "parameters"}
    assert read == dataclasses.asdict(ModelConfig(**settings))


# --- small models of every setting, in JavaScript and in Python ---------------------------------

SMALL = {"src_vocab": 11, "tgt_vocab": 13, "N": 2, "d_model": 16, "d_ff": 24, "h": 2}
VARIANTS = {
    "post-norm, target tied": {"tie_target_embeddings": True},
    "pre-norm, target tied": {"norm_first": True, "tie_target_embeddings": True},
    "d_v apart from d_k, untied": {"d_k": 6, "d_v": 10},
    "learned positions, pre-norm": {"learned_positions": True, "max_len": 12, "norm_first": True},
    "shared embeddings": {"share_embeddings": True, "src_vocab": 13},
}


def small_model(changes: dict) -> torch.nn.Module:
    torch.manual_seed(sum(map(ord, json.dumps(changes, sort_keys=True))))
    model = make_model(ModelConfig(**(SMALL | changes)))
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:  # biases and norms away from their starting values
                parameter.copy_(torch.randn_like(parameter) * 0.5 + (parameter == 1).float())
            else:  # larger weights: peaked distributions, no near ties between words
                parameter.mul_(3.0)
    return model.eval()


def exported(model) -> dict:
    """The model as the page reads it: a manifest and every tensor in float32, packed as
    annotated/export/browser_model.py packs them (a tied or shared matrix stored once)."""
    config = model.config
    tensors, blob = browser_model.pack_model(model, {}, {})  # no matrix quantized
    vocab = {
        side: [f"{side}{i}" for i in range(getattr(config, f"{side}_vocab"))]
        for side in ("src", "tgt")
    }
    manifest = {
        "model": dataclasses.asdict(config) | {"parameters": 0},
        "tensors": tensors,
        "specials": {"src": SPECIALS, "tgt": SPECIALS},
        "vocab": vocab,
    }
    return {"manifest": manifest, "weights": base64.b64encode(bytes(blob)).decode("ascii")}


RUN_IN_JS = """([data, src, tgt, max_len, beam, alpha]) => {
  const bytes = Uint8Array.from(atob(data.weights), (c) => c.charCodeAt(0));
  const translator = AnnotatedTransformer.load(data.manifest, bytes);
  const model = translator.model, vocab = model.config.tgt_vocab;
  const whole = Array.from(model.forward(src, tgt));
  const cache = new AnnotatedTransformer.DecoderCache(model);
  const memory = model.encode(src);
  const stepwise = [];
  for (const id of tgt) {
    const states = model.decode(memory, src.length, [id], cache);
    stepwise.push(...model.generator.forward(states, 1));
  }
  return {
    vocab,
    whole,
    stepwise,
    greedy: translator.greedy(src, max_len).ids,
    beam: translator.beamSearch(src, beam, alpha, max_len).ids,
  };
}"""


@pytest.mark.parametrize("changes", VARIANTS.values(), ids=list(VARIANTS))
def test_the_pages_model_computes_what_chapter_2s_computes(js, changes):
    model = small_model(changes)
    src = [4, 9, 5, 7, 10, 6, SPECIALS["eos"]]
    tgt = [SPECIALS["bos"], 8, 4, 12, 5, 9]
    max_len, beam, alpha = 8, 3, 0.6
    got = js.evaluate(RUN_IN_JS, [exported(model), src, tgt, max_len, beam, alpha])

    src_t, tgt_t = torch.tensor([src]), torch.tensor([tgt])
    src_mask = torch.ones(1, 1, len(src), dtype=torch.bool)
    with torch.no_grad():
        logits = model(src_t, tgt_t, src_mask, subsequent_mask(len(tgt)))[0]
    for name in ("whole", "stepwise"):
        ours = torch.tensor(got[name], dtype=torch.float64).view(len(tgt), got["vocab"])
        worst = float((ours - logits.double()).abs().max())
        assert worst < 1e-4, f"{name}: the page's logits are off by {worst:.2g}"

    specials = SpecialTokens(SPECIALS["pad"], SPECIALS["bos"], SPECIALS["eos"])
    greedy = greedy_decode_cached(model, src_t, src_mask, specials, max_len)[0].tolist()
    searched = beam_search(model, src_t, src_mask, specials, max_len, beam, alpha)[0].tolist()
    assert got["greedy"] == until_eos(greedy)
    assert got["beam"] == until_eos(searched)


def until_eos(ids: list[int]) -> list[int]:
    """The ids before </s> (the page leaves it out), padding dropped."""
    return ids[: ids.index(SPECIALS["eos"])] if SPECIALS["eos"] in ids else ids


# --- the page refuses what it does not implement -----------------------------------------------

UNSUPPORTED = {
    "an unknown setting": ({"activation": "gelu"}, 'its setting activation = "gelu" is unknown'),
    "norm_first neither true nor false": (
        {"norm_first": "sometimes"},
        'its setting norm_first = "sometimes" is not true or false',
    ),
    "an untied output projection": (
        {"tie_target_embeddings": False},
        "its export has no tensor generator.weight",
    ),
    "d_k the tensors do not have": (
        {"d_k": 32},
        "its tensor encoder.layers.0.self_attn.w_q.weight is [256,256], where its settings make "
        "it [128,256]",
    ),
    "d_ff not a multiple of 4": ({"d_ff": 1022}, "its setting d_ff = 1022 is not a multiple of 4"),
}


@pytest.fixture(scope="module")
def model_data(site) -> tuple[str, dict]:  # noqa: F811
    """The built site's model-data.js: its first line, and the data it assigns."""
    text = (site / "_static" / "try" / "model-data.js").read_text(encoding="utf-8")
    comment, assignment = text.split("\n", 1)
    prefix = "window.AnnotatedTryData = "
    assert assignment.startswith(prefix), assignment[:80]
    return comment, json.loads(assignment[len(prefix) :].rstrip().removesuffix(";"))


@pytest.mark.parametrize(("changes", "says"), UNSUPPORTED.values(), ids=list(UNSUPPORTED))
def test_the_page_refuses_a_setting_it_does_not_implement_in_one_line(
    browser,  # noqa: F811
    server,  # noqa: F811
    model_data,
    changes,
    says,
):
    comment, data = model_data
    data = data | {"manifest": data["manifest"] | {"model": data["manifest"]["model"] | changes}}
    script = f"{comment}\nwindow.AnnotatedTryData = {json.dumps(data, ensure_ascii=False)};\n"
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    page.route(
        "**/_static/try/model-data.js",
        lambda route: route.fulfill(body=script, content_type="text/javascript; charset=utf-8"),
    )
    page.goto(f"{server}try.html")
    page.wait_for_function("() => window.AnnotatedTry", timeout=30_000)
    settled = page.evaluate("() => AnnotatedTry.ready.then(() => 'started', (e) => e.name)")
    status = page.inner_text("#try-status")
    output = page.inner_text("#try-output")
    translate_disabled = page.is_disabled("#try-translate")
    context.close()
    assert settled == "UnsupportedModel", status
    assert status.startswith(REFUSED + says), status
    assert WHAT_TO_DO in status and "\n" not in status, status
    assert output == "" and translate_disabled, (output, translate_disabled)
