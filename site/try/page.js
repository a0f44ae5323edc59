// The "Try the model" page: loads chapter 7's model (model-data.js, written by the site's build
// from site/try/model.bin and model.json), translates what the reader types, and draws what the
// model did: its attention, greedy decoding's five likeliest words at each step, the beam's
// candidates. Nothing leaves the browser. window.AnnotatedTry exposes the same translate() the
// page calls, and `ready`, for the tests and the benchmark.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const MAX_TOKENS = 256; // source tokens, as the translate filter's --max-tokens
  const state = { model: null, manifest: null, last: null };
  let resolveReady, rejectReady;
  const ready = new Promise((resolve, reject) => {
    resolveReady = resolve;
    rejectReady = reject;
  });

  function element(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) node.append(child);
    return node;
  }

  function decodeBase64(text) {
    const raw = atob(text);
    const bytes = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return bytes;
  }

  // Chapter 5's detokenize, with its own regular expressions (exported into the manifest).
  function makeDetokenizer(rules) {
    const compile = (rule) => new RegExp(rule.pattern, "g" + (rule.ignorecase ? "i" : ""));
    const hyphen = compile(rules.hyphen);
    const after = compile(rules.no_space_after);
    const before = compile(rules.no_space_before);
    return function detokenize(tokens) {
      let text = tokens.join(" ").replace(hyphen, "-").replace(after, "$1").replace(before, "$1");
      const pieces = text.split(' " '); // straight quotes: opening and closing in turn
      if (pieces.length > 1) {
        let rebuilt = pieces[0];
        let opening = true;
        for (const piece of pieces.slice(1)) {
          rebuilt += (opening ? ' "' : '" ') + piece;
          opening = !opening;
        }
        text = rebuilt;
      }
      return text;
    };
  }

  function setup(data, started) {
    const manifest = data.manifest;
    if (manifest.format !== 1) {
      throw new Error("model-data.js is of another format: rebuild the site");
    }
    const model = window.AnnotatedTransformer.load(manifest, decodeBase64(data.weights));
    Object.assign(
      state,
      { model, manifest },
      manifest.subwords ? subwordText(manifest) : wordText(manifest),
    );
    state.loadSeconds = (performance.now() - started) / 1000;
  }

  // A model of words (chapter 5's Vocab): spaCy's German tokenizer, the words' ids (<unk> for a
  // word the vocabulary lacks), <unk> copied from the source, and chapter 5's detokenizer.
  function wordText(manifest) {
    const tokenize = window.AnnotatedTokenizer.make(manifest.tokenizer);
    const detokenize = makeDetokenizer(manifest.detokenize);
    const srcIndex = new Map(manifest.vocab.src.map((token, i) => [token, i]));
    const unk = manifest.specials.src.unk;
    return {
      vocab: manifest.vocab.tgt,
      copies: true,
      source: (text) => {
        const words = tokenize(text);
        return { words, ids: words.map((w) => (srcIndex.has(w) ? srcIndex.get(w) : unk)) };
      },
      text: (ids, tokens) => detokenize(tokens),
    };
  }

  // A model of shared subwords (chapter 5's Subwords): sentencepiece's pieces both ways
  // (subwords.js), so the ids are the vocabulary's and the text comes back as sentencepiece
  // decodes it. Such a model never needs <unk>, so nothing is copied.
  function subwordText(manifest) {
    const subwords = window.AnnotatedSubwords.make(manifest.subwords);
    return {
      vocab: manifest.subwords.pieces,
      copies: false,
      source: (text) => {
        const ids = subwords.encode(text);
        return { words: ids.map((id) => manifest.subwords.pieces[id]), ids };
      },
      text: (ids) => subwords.decode(ids),
    };
  }

  // Text in, text out, as `python -m annotated.translate` does it, with what the page draws.
  function translate(text, options) {
    const { model, manifest, vocab } = state;
    const beam = options && options.beam ? options.beam : 1;
    const alpha = options && options.alpha !== undefined ? options.alpha : manifest.decoding.alpha;
    const started = performance.now();
    text = text.trim();
    if (!text) return { text: "", words: [], tokens: [], seconds: 0 };
    const source = state.source(text);
    const words = source.words;
    const srcIds = source.ids.concat([manifest.specials.src.eos]);
    if (srcIds.length > MAX_TOKENS) {
      throw new Error(`${srcIds.length} tokens: the page translates at most ${MAX_TOKENS}`);
    }
    const maxLen = srcIds.length + manifest.decoding.extra_length;
    const found =
      beam > 1 ? model.beamSearch(srcIds, beam, alpha, maxLen) : model.greedy(srcIds, maxLen);
    const maps = found.maps;
    const copied = state.copies
      ? model.copyUnknowns(words, srcIds, found.ids, maps.decoderSource)
      : found.ids.map(() => null);
    const tokens = found.ids.map((id, i) => (copied[i] !== null ? copied[i] : vocab[id]));
    return {
      text: state.text(found.ids, tokens),
      words,
      srcIds,
      ids: found.ids,
      tokens,
      copied,
      steps: found.steps || null,
      trace: found.trace || null,
      beam,
      alpha,
      maps,
      seconds: (performance.now() - started) / 1000,
    };
  }
  // Drawing ---------------------------------------------------------------------------------------
  const KINDS = {
    encoder: "encoder self-attention",
    decoderSelf: "decoder self-attention",
    decoderSource: "decoder-source attention",
  };

  // The rows and columns, as chapter 7's attention_maps labels them: a source word, or a target
  // position as "the word it reads → the word it writes".
  function labels(result) {
    const src = result.words.concat(["</s>"]);
    const reads = ["<s>"].concat(result.tokens);
    const predicts = result.tokens.concat(["</s>"]);
    return { src, tgt: reads.map((r, i) => `${r} → ${predicts[i]}`) };
  }

  function drawAttention() {
    const result = state.last;
    const box = $("try-attention");
    box.replaceChildren();
    if (!result || !result.words.length) return;
    const kind = $("try-kind").value;
    const layer = Number($("try-layer").value) - 1;
    const head = $("try-head").value;
    const { src, tgt } = labels(result);
    const [queries, keys] =
      kind === "encoder" ? [src, src] : kind === "decoderSelf" ? [tgt, tgt] : [tgt, src];
    const heads = result.maps[kind][layer];
    const weight = (q, k) =>
      head === "mean"
        ? heads.reduce((sum, h) => sum + h[q][k], 0) / heads.length
        : heads[Number(head) - 1][q][k];
    const table = element("table", {
      class: "try-map",
      "aria-label": `${KINDS[kind]}, layer ${layer + 1}, head ${head}`,
    });
    const top = element("tr", {}, element("th", { scope: "col", text: "query ↓ key →" }));
    keys.forEach((key, k) =>
      top.append(
        element(
          "th",
          { scope: "col", class: "try-key", "data-k": k },
          element("span", { text: key }),
        ),
      ),
    );
    table.append(element("thead", {}, top));
    const body = element("tbody");
    queries.forEach((query, q) => {
      const row = element("tr", { "data-q": q });
      const label = element("button", {
        type: "button",
        class: "try-query",
        text: query,
        "data-q": q,
      });
      row.append(element("th", { scope: "row" }, label));
      keys.forEach((key, k) => {
        const w = weight(q, k);
        const cell = element("td", {
          title: `${query} reads ${key}: ${w.toFixed(3)}`,
          "data-w": w.toFixed(4),
        });
        cell.style.setProperty("--w", w.toFixed(4));
        row.append(cell);
      });
      body.append(row);
    });
    table.append(body);
    box.append(
      element(
        "div",
        { class: "try-scroll", tabindex: "0", role: "region", "aria-label": "attention weights" },
        table,
      ),
    );
    const focus = element("p", {
      id: "try-focus",
      "aria-live": "polite",
      text: "Hover or focus a query word to see what it attends to.",
    });
    box.append(focus);
    const show = (q) => {
      body
        .querySelectorAll("tr")
        .forEach((tr) => tr.classList.toggle("try-active", Number(tr.dataset.q) === q));
      const ranked = keys
        .map((key, k) => [key, weight(q, k)])
        .sort((a, b) => b[1] - a[1])
        .slice(0, 3);
      focus.textContent =
        `${queries[q]} attends to ` +
        ranked.map(([key, w]) => `${key} (${w.toFixed(2)})`).join(", ");
    };
    body.querySelectorAll("button.try-query").forEach((button) => {
      const q = Number(button.dataset.q);
      button.addEventListener("mouseenter", () => show(q));
      button.addEventListener("focus", () => show(q));
      button.addEventListener("click", () => show(q));
    });
  }

  function drawSteps() {
    const result = state.last;
    const box = $("try-steps");
    box.replaceChildren();
    if (!result || !result.words.length) return;
    const vocab = state.vocab;
    if (result.steps) {
      box.append(
        element("p", {
          text:
            "Greedy decoding: at each step the five likeliest next words; " +
            "the first is written.",
        }),
      );
      const table = element("table", { class: "try-table" });
      table.append(
        element(
          "thead",
          {},
          element(
            "tr",
            {},
            ...["step", "written", "five likeliest next words"].map((t) =>
              element("th", { scope: "col", text: t }),
            ),
          ),
        ),
      );
      const body = element("tbody");
      result.steps.forEach((top, i) => {
        const words = top.map((t) => `${vocab[t.id]} ${(100 * t.p).toFixed(1)}%`).join(" · ");
        body.append(
          element(
            "tr",
            {},
            element("td", { text: String(i + 1) }),
            element("td", { text: vocab[top[0].id] }),
            element("td", { text: words }),
          ),
        );
      });
      table.append(body);
      box.append(
        element(
          "div",
          { class: "try-scroll", tabindex: "0", role: "region", "aria-label": "greedy steps" },
          table,
        ),
      );
      return;
    }
    const lp = window.AnnotatedTransformer.lengthPenalty;
    box.append(
      element("p", {
        text:
          `Beam search, k = ${result.beam}: at each step the ${2 * result.beam} best extensions ` +
          "of the beam with their summed log-probabilities; kept (k), finished " +
          "(✓: ended within the best k) or dropped.",
      }),
    );
    const table = element("table", { class: "try-table" });
    table.append(
      element(
        "thead",
        {},
        element(
          "tr",
          {},
          ...["step", "candidates (sum of log-probabilities)"].map((t) =>
            element("th", { scope: "col", text: t }),
          ),
        ),
      ),
    );
    const body = element("tbody");
    const finished = [];
    result.trace.forEach((candidates, i) => {
      const cell = element("td");
      candidates.forEach((c) => {
        const word = vocab[c.tokens[c.tokens.length - 1]];
        const mark = c.finished ? "✓" : c.kept !== null ? "k" : "×";
        const fate = c.finished ? "finished" : c.kept !== null ? "kept" : "dropped";
        cell.append(
          element(
            "span",
            {
              class: `try-cand try-${fate}`,
              title: c.tokens.map((t) => vocab[t]).join(" "),
            },
            `${word} ${c.score.toFixed(2)} ${mark}`,
          ),
        );
        if (c.finished) finished.push(c);
      });
      body.append(element("tr", {}, element("td", { text: String(i + 1) }), cell));
    });
    table.append(body);
    box.append(
      element(
        "div",
        { class: "try-scroll", tabindex: "0", role: "region", "aria-label": "beam steps" },
        table,
      ),
    );
    box.append(
      element("p", {
        text:
          "The finished candidates, ranked by the length penalty: " +
          `score / ((5 + length) / 6)^α with α = ${result.alpha}.`,
      }),
    );
    const ranked = finished
      .map((c) => ({ c, penalty: lp(c.tokens.length, result.alpha) }))
      .map((x) => ({ ...x, penalized: x.c.score / x.penalty }))
      .sort((a, b) => b.penalized - a.penalized);
    const list = element("table", { class: "try-table" });
    list.append(
      element(
        "thead",
        {},
        element(
          "tr",
          {},
          ...["candidate", "length", "sum", "lp", "penalized"].map((t) =>
            element("th", { scope: "col", text: t }),
          ),
        ),
      ),
    );
    const rows = element("tbody");
    ranked.forEach((x, i) => {
      const words = x.c.tokens.map((t) => vocab[t]).join(" ");
      const row = element(
        "tr",
        { class: i === 0 ? "try-winner" : "" },
        element("td", { text: (i === 0 ? "chosen: " : "") + words }),
        element("td", { text: String(x.c.tokens.length) }),
        element("td", { text: x.c.score.toFixed(2) }),
        element("td", { text: x.penalty.toFixed(2) }),
        element("td", { text: x.penalized.toFixed(3) }),
      );
      rows.append(row);
    });
    list.append(rows);
    box.append(
      element(
        "div",
        { class: "try-scroll", tabindex: "0", role: "region", "aria-label": "finished candidates" },
        list,
      ),
    );
  }

  function options() {
    const beamMode = $("try-mode-beam").checked;
    return {
      beam: beamMode ? Number($("try-beam").value) : 1,
      alpha: Number($("try-alpha").value),
    };
  }

  function run() {
    const text = $("try-input").value;
    const out = $("try-output");
    try {
      const result = translate(text, options());
      state.last = result;
      out.textContent = result.text || "(nothing to translate)";
      out.dataset.source = text; // what this output translates (the tests wait for it)
      out.dataset.beam = String(result.beam);
      $("try-time").textContent = result.words.length
        ? `${result.words.length} words in, ${result.seconds.toFixed(2)} s`
        : "";
      drawAttention();
      drawSteps();
      // book.js puts its "scroll sideways" cue above each box that is wider than the screen.
      document
        .querySelectorAll(".try-scroll")
        .forEach((box) => box.dispatchEvent(new Event("annotated-chart-drawn", { bubbles: true })));
    } catch (error) {
      out.textContent = `Could not translate: ${error.message}`;
    }
  }

  function about(manifest) {
    const { model: m, run } = manifest;
    const copied = state.copies ? "yes" : "no"; // the averaged model, as the page runs it
    const averaged = run.scores.filter((s) => s.weights !== "last" && s["<unk> copied"] === copied);
    const beam = averaged.find((s) => s.decoding.startsWith("beam"));
    const greedy = averaged.find((s) => s.decoding === "greedy");
    const millions = (m.parameters / 1e6).toFixed(1);
    return (
      `Chapter 7's model: ${m.N} encoder and ${m.N} decoder layers, d_model ${m.d_model}, ` +
      `${millions} million parameters, trained on Multi30k's German-English image captions; ` +
      `test2016 BLEU ${beam.BLEU} with beam search, ${greedy.BLEU} greedy. ` +
      "It runs in this page: nothing you type leaves your browser."
    );
  }

  function start() {
    const root = $("try-app");
    if (!root) return;
    const status = $("try-status");
    const started = performance.now();
    const script = document.createElement("script");
    script.src = root.dataset.model;
    script.onload = () => {
      try {
        setup(window.AnnotatedTryData, started);
        window.AnnotatedTryData = null; // the base64 text is not needed once decoded
        $("try-about").textContent = about(state.manifest);
        status.textContent = `Model loaded in ${state.loadSeconds.toFixed(1)} s.`;
        const m = state.manifest.model;
        $("try-layer").replaceChildren(
          ...Array.from({ length: m.N }, (_, i) => element("option", { text: String(i + 1) })),
        );
        $("try-layer").value = String(m.N); // the last layer: the one copying <unk> reads
        const heads = Array.from({ length: m.h }, (_, i) =>
          element("option", { text: String(i + 1) }),
        );
        $("try-head").replaceChildren(
          element("option", { value: "mean", text: "mean of the heads" }),
          ...heads,
        );
        const examples = $("try-examples");
        state.manifest.examples.forEach((sentence) => {
          const button = element("button", {
            type: "button",
            class: "try-example",
            text: sentence,
          });
          button.addEventListener("click", () => {
            $("try-input").value = sentence;
            run();
          });
          examples.append(button);
        });
        document
          .querySelectorAll("#try-app [disabled], .try-controls [disabled]")
          .forEach((n) => (n.disabled = false));
        $("try-input").value = state.manifest.examples[0];
        run();
        resolveReady(state.loadSeconds);
      } catch (error) {
        // A model of settings transformer.js does not implement: its one line, as it is.
        const refused = error.name === "UnsupportedModel";
        status.textContent = refused
          ? error.message
          : `The model could not start: ${error.message}`;
        rejectReady(error);
      }
    };
    script.onerror = () => {
      status.textContent = "The model's file (try/model-data.js) did not load.";
      rejectReady(new Error("model-data.js did not load"));
    };
    document.body.append(script);
    $("try-form").addEventListener("submit", (event) => {
      event.preventDefault();
      run();
    });
    $("try-input").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        run();
      }
    });
    const redraw = () => {
      drawAttention();
      document
        .querySelectorAll("#try-attention .try-scroll")
        .forEach((box) => box.dispatchEvent(new Event("annotated-chart-drawn", { bubbles: true })));
    };
    for (const id of ["try-kind", "try-layer", "try-head"])
      $(id).addEventListener("change", redraw);
    for (const id of ["try-mode-greedy", "try-mode-beam"]) $(id).addEventListener("change", run);
  }

  window.AnnotatedTry = { ready, translate, state };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
