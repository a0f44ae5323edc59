// Chapter 7's Transformer, computed in the reader's browser: chapter 2's model class for class
// (annotated/ch02_model.py, its attention from annotated/ch01_attention.py), and chapter 6's
// cached greedy decoding, beam search and copying of <unk> (annotated/ch06_decoding.py), over the
// weights annotated/export/browser_model.py exports (site/try/model.bin, described by model.json).
//
// Names follow the Python: a class here is the Python class of that name, its attributes are the
// Python module's (so `encoder.layers[0].self_attn.w_q` holds the tensor the manifest calls
// encoder.layers.0.self_attn.w_q.weight), the sizes are ModelConfig's fields (d_model, d_k, d_v,
// d_ff, h, N), and a method is the Python method in JavaScript's camelCase (project_keys_values
// is projectKeysValues). What the Python does for a batch, this does for one sentence, and no
// dropout: the model only translates here.
//
// modelConfig() reads the manifest's whole ModelConfig and refuses, with an UnsupportedModel
// error whose message the page shows as it is, a setting it does not know or a value it does not
// implement; SETTINGS lists every setting it knows (tests/test_try_model_config.py holds it to
// ModelConfig's fields).
//
// A plain script (not a module), so that the page also works opened from disk (file://), where
// module scripts do not load. It defines window.AnnotatedTransformer.
//
// Numbers: the weights are float32 (dequantized once on load); the matrix products are float32
// sums in WebAssembly (as PyTorch's), everything else JavaScript doubles. Shapes are written as
// in the book, without the batch: (positions, features), row-major, a Float64Array and its
// number of rows.
(function () {
  "use strict";

  // --- the manifest's settings -----------------------------------------------------------------

  // A model the page cannot compute. Its message is one line, shown on the page as it is.
  class UnsupportedModel extends Error {
    constructor(problem) {
      super(
        `This page cannot run this model: ${problem}. Export a model with settings the page ` +
          "supports (make try-model), or teach site/try/transformer.js the new one.",
      );
      this.name = "UnsupportedModel";
    }
  }

  const isCount = (value) => Number.isInteger(value) && value > 0;
  const KINDS = {
    count: { valid: isCount, says: "a positive whole number" },
    width: { valid: (v) => v === null || isCount(v), says: "a positive whole number or null" },
    probability: {
      valid: (v) => typeof v === "number" && v >= 0 && v < 1,
      says: "a number in [0, 1)",
    },
    flag: { valid: (v) => v === true || v === false, says: "true or false" },
  };

  // Every field of chapter 2's ModelConfig: its kind, its default there, and what this file does
  // with it. A setting the manifest leaves out takes the Python's default (the vocabularies'
  // sizes, which have none, are the manifest's vocabularies).
  const SETTINGS = {
    src_vocab: { kind: "count", default: null, does: "Embeddings rows (source)" },
    tgt_vocab: { kind: "count", default: null, does: "Embeddings rows (target), generator" },
    N: { kind: "count", default: 6, does: "Encoder and Decoder layers" },
    d_model: { kind: "count", default: 512, does: "every layer's width" },
    d_ff: { kind: "count", default: 2048, does: "PositionwiseFeedForward's inner width" },
    h: { kind: "count", default: 8, does: "MultiHeadAttention's heads" },
    d_k: { kind: "width", default: null, does: "query and key width per head" },
    d_v: { kind: "width", default: null, does: "value width per head" },
    p_drop: { kind: "probability", default: 0.1, does: "none: no dropout when translating" },
    p_attn_drop: { kind: "probability", default: 0.0, does: "none: no dropout when translating" },
    norm_first: { kind: "flag", default: false, does: "SublayerConnection's order, final norms" },
    share_embeddings: { kind: "flag", default: false, does: "one matrix, three roles" },
    tie_target_embeddings: { kind: "flag", default: false, does: "generator = target embedding" },
    max_len: { kind: "count", default: 5000, does: "LearnedPositions' rows" },
    learned_positions: { kind: "flag", default: false, does: "LearnedPositions" },
  };
  // What the manifest's "model" holds besides ModelConfig's fields (annotated/export/browser_model.py).
  const ABOUT = ["parameters"];

  // The manifest's model settings, checked and completed as ModelConfig.__post_init__ does.
  function modelConfig(manifest) {
    const given = manifest.model || {};
    for (const name of Object.keys(given)) {
      if (!(name in SETTINGS) && !ABOUT.includes(name)) {
        throw new UnsupportedModel(`its setting ${name} = ${show(given[name])} is unknown here`);
      }
    }
    // A word model lists both vocabularies; a subword model one shared piece table.
    const [src, tgt] = manifest.subwords
      ? [manifest.subwords.pieces, manifest.subwords.pieces]
      : [manifest.vocab.src, manifest.vocab.tgt];
    const sizes = { src_vocab: src.length, tgt_vocab: tgt.length };
    const config = {};
    for (const [name, setting] of Object.entries(SETTINGS)) {
      const value = name in given ? given[name] : (sizes[name] ?? setting.default);
      if (!KINDS[setting.kind].valid(value)) {
        const says = KINDS[setting.kind].says;
        throw new UnsupportedModel(`its setting ${name} = ${show(value)} is not ${says}`);
      }
      config[name] = value;
    }
    for (const side of ["src", "tgt"]) {
      if (config[`${side}_vocab`] !== sizes[`${side}_vocab`]) {
        const words = sizes[`${side}_vocab`];
        const problem = `${side}_vocab = ${config[`${side}_vocab`]}, but its vocabulary has`;
        throw new UnsupportedModel(`its setting ${problem} ${words} words`);
      }
    }
    for (const name of ["d_k", "d_v"]) {
      if (config[name] !== null) continue;
      if (config.d_model % config.h) {
        const reason = `d_model = ${config.d_model} is not divisible by h = ${config.h}`;
        throw new UnsupportedModel(
          `its setting ${name} = null asks for d_model / h, and ${reason}`,
        );
      }
      config[name] = config.d_model / config.h;
    }
    if (config.share_embeddings && config.src_vocab !== config.tgt_vocab) {
      throw new UnsupportedModel(
        "its setting share_embeddings = true needs one vocabulary for both languages",
      );
    }
    if (!config.learned_positions && config.d_model % 2) {
      throw new UnsupportedModel(
        `its setting d_model = ${config.d_model} is odd, and the sinusoids pair dimensions`,
      );
    }
    // The matrix kernel (linear.wat) sums four floats at a time: every product's input width
    // must be a multiple of 4.
    const widths = { d_model: config.d_model, d_ff: config.d_ff, "h * d_v": config.h * config.d_v };
    for (const [name, width] of Object.entries(widths)) {
      if (width % 4) {
        throw new UnsupportedModel(
          `its setting ${name} = ${width} is not a multiple of 4, which the page's matrix ` +
            "products need",
        );
      }
    }
    return config;
  }

  function show(value) {
    return value === undefined ? "undefined" : JSON.stringify(value);
  }

  // --- the weights -------------------------------------------------------------------------------

  function halfToFloat(bits) {
    const sign = bits & 0x8000 ? -1 : 1;
    const exponent = (bits >> 10) & 0x1f;
    const fraction = bits & 0x3ff;
    if (exponent === 0) return sign * fraction * Math.pow(2, -24); // subnormal
    if (exponent === 31) return fraction ? NaN : sign * Infinity;
    return sign * (1 + fraction / 1024) * Math.pow(2, exponent - 15);
  }

  // One tensor of the export: float32 as stored, or integers of `bits` bits times a scale per
  // group of `group` along each row, a float16 times 2^-shift (annotated/export/browser_model.py).
  function readTensor(bytes, entry) {
    const count = entry.shape.reduce((a, b) => a * b, 1);
    const view = new DataView(bytes.buffer, bytes.byteOffset + entry.offset, entry.bytes);
    const out = new Float32Array(count);
    if (entry.bits === 32) {
      for (let i = 0; i < count; i++) out[i] = view.getFloat32(4 * i, true);
      return out;
    }
    const { bits, group } = entry;
    const scales = count / group;
    const scale = new Float64Array(scales);
    const unit = Math.pow(2, -entry.shift); // the matrix's power of two (browser_model.py)
    for (let g = 0; g < scales; g++) scale[g] = halfToFloat(view.getUint16(2 * g, true)) * unit;
    const start = entry.offset + 2 * scales;
    const end = entry.offset + entry.bytes;
    const stream = new Uint8Array(end - start + 3); // room to read three bytes past the last value
    stream.set(bytes.subarray(start, end));
    const mask = (1 << bits) - 1;
    const half = 1 << (bits - 1);
    for (let i = 0, bit = 0; i < count; i++, bit += bits) {
      const at = bit >> 3;
      const word = stream[at] | (stream[at + 1] << 8) | (stream[at + 2] << 16);
      let code = (word >> (bit & 7)) & mask;
      if (code >= half) code -= 1 << bits; // two's complement
      out[i] = code * scale[(i / group) | 0];
    }
    return out;
  }

  // x (n, d_in) times W^T for W (d_out, d_in), plus b: (n, d_out). Four running sums (d_in is a
  // multiple of 4) let the processor overlap the additions: about 1.5x faster than one.
  function linear(x, n, dIn, w, b, dOut) {
    const y = new Float64Array(n * dOut);
    for (let i = 0; i < n; i++) {
      const row = i * dIn;
      for (let o = 0; o < dOut; o++) {
        const wRow = o * dIn;
        let s0 = 0,
          s1 = 0,
          s2 = 0,
          s3 = 0;
        for (let k = 0; k < dIn; k += 4) {
          s0 += x[row + k] * w[wRow + k];
          s1 += x[row + k + 1] * w[wRow + k + 1];
          s2 += x[row + k + 2] * w[wRow + k + 2];
          s3 += x[row + k + 3] * w[wRow + k + 3];
        }
        y[i * dOut + o] = (b ? b[o] : 0) + (s0 + s1 + (s2 + s3));
      }
    }
    return y;
  }

  // The same products in WebAssembly, four float32 lanes at a time (128-bit SIMD), where the
  // browser has it: several times faster than the loop above, and float32 sums as PyTorch's. The
  // source is site/try/linear.wat; after changing it, compile it with wabt's wat2wasm and paste
  // the base64 of the .wasm here.
  // prettier-ignore
  const LINEAR_WASM = "AGFzbQEAAAABCwFgB39/f39/f38AAg8BA2VudgZtZW1vcnkCAAEDAgEABwoBBmxpbmVhcgAACr4BAbsBAgZ/AXsgAkECdCEMAkADQCAHIAFPDQEgACAHIAxsaiEKQQAhCCADIQsCQANAIAggBU8NAUMAAAAA/RMhDUEAIQkDQCANIAogCWr9AAQAIAsgCWr9AAQA/eYB/eQBIQ0gCUEQaiEJIAkgDEkNAAsgBiAN/R8AIA39HwGSIA39HwIgDf0fA5KSIAQgCEECdGoqAgCSOAIAIAZBBGohBiALIAxqIQsgCEEBaiEIDAALCyAHQQFqIQcMAAsLCw==";
  const SCRATCH = 1 << 20; // floats of input and of output the kernel works on at a time

  // Weights live in the kernel's memory; `take(count)` hands out the next float32 array there.
  function wasmKernel(floats) {
    const bytes = Uint8Array.from(atob(LINEAR_WASM), (c) => c.charCodeAt(0));
    const pages = Math.ceil((4 * (floats + 2 * SCRATCH + 8192)) / 65536);
    const memory = new WebAssembly.Memory({ initial: pages, maximum: pages });
    const instance = new WebAssembly.Instance(new WebAssembly.Module(bytes), { env: { memory } });
    let next = 0;
    const take = (count) => {
      const array = new Float32Array(memory.buffer, next, count);
      next += 4 * count;
      return array;
    };
    const [zeros, x, y] = [take(8192), take(SCRATCH), take(SCRATCH)];
    return {
      take,
      linear(input, n, dIn, w, b, dOut) {
        if (dOut > 8192 || dIn > SCRATCH || dOut > SCRATCH) {
          return linear(input, n, dIn, w, b, dOut);
        }
        const out = new Float64Array(n * dOut);
        const rows = Math.max(1, Math.floor(SCRATCH / Math.max(dIn, dOut)));
        for (let start = 0; start < n; start += rows) {
          const count = Math.min(rows, n - start);
          x.set(input.subarray(start * dIn, (start + count) * dIn));
          const bias = (b || zeros).byteOffset;
          instance.exports.linear(x.byteOffset, count, dIn, w.byteOffset, bias, dOut, y.byteOffset);
          out.set(y.subarray(0, count * dOut), start * dOut);
        }
        return out;
      },
    };
  }

  // Every tensor of the export, by its PyTorch name, and the matrix product to use them with.
  // The modules below `take` theirs; a tensor the settings call for that is missing or of another
  // shape, or one no module takes, means a model this file does not compute.
  class Weights {
    constructor(manifest, bytes) {
      const size = (entry) => entry.shape.reduce((a, b) => a * b, 1);
      const floats = manifest.tensors.reduce((sum, entry) => sum + size(entry), 0);
      let kernel = null;
      try {
        kernel = typeof WebAssembly === "object" ? wasmKernel(floats) : null;
      } catch (error) {
        kernel = null; // no SIMD here (an older browser): the plain loops do the same work
      }
      this.linear = kernel ? kernel.linear : linear;
      this.kernel = kernel ? "WebAssembly SIMD" : "JavaScript";
      this.tensors = new Map();
      this.untaken = new Set();
      for (const entry of manifest.tensors) {
        const values = readTensor(bytes, entry);
        const stored = kernel ? kernel.take(values.length) : values;
        if (kernel) stored.set(values);
        this.tensors.set(entry.name, { shape: entry.shape, values: stored });
        this.untaken.add(entry.name);
      }
    }

    take(name, shape, why) {
      const tensor = this.tensors.get(name);
      if (!tensor) {
        throw new UnsupportedModel(`its export has no tensor ${name}${why ? ` (${why})` : ""}`);
      }
      if (tensor.shape.join() !== shape.join()) {
        const sizes = `[${tensor.shape}], where its settings make it [${shape}]`;
        throw new UnsupportedModel(`its tensor ${name} is ${sizes}`);
      }
      this.untaken.delete(name);
      return tensor.values;
    }

    // Once the model is built: a tensor no module took is a part of the model not computed here.
    checkAllTaken() {
      if (this.untaken.size) {
        const names = [...this.untaken].join(", ");
        throw new UnsupportedModel(`its export has tensors no part of the page computes: ${names}`);
      }
    }
  }

  // --- chapter 2's model, class for class -------------------------------------------------------

  // nn.Linear: x (n, d_in) -> x W^T + b (n, d_out).
  class Linear {
    constructor(weight, bias, d_in, d_out, product) {
      Object.assign(this, { weight, bias, d_in, d_out, product });
    }

    static from(weights, name, d_in, d_out) {
      const weight = weights.take(`${name}.weight`, [d_out, d_in]);
      const bias = weights.take(`${name}.bias`, [d_out]);
      return new Linear(weight, bias, d_in, d_out, weights.linear);
    }

    forward(x, n) {
      return this.product(x, n, this.d_in, this.weight, this.bias, this.d_out);
    }
  }

  // Chapter 2's LayerNorm (and nn.LayerNorm, the same formula): each vector to mean 0 and
  // (biased) variance 1, eps inside the root, then gamma (weight) and beta (bias).
  class LayerNorm {
    constructor(weights, name, d_model) {
      this.weight = weights.take(`${name}.weight`, [d_model]);
      this.bias = weights.take(`${name}.bias`, [d_model]);
      this.d_model = d_model;
      this.eps = 1e-5;
    }

    forward(x, n) {
      const d = this.d_model;
      const y = new Float64Array(n * d);
      for (let i = 0; i < n; i++) {
        let mean = 0;
        for (let k = 0; k < d; k++) mean += x[i * d + k];
        mean /= d;
        let variance = 0;
        for (let k = 0; k < d; k++) variance += (x[i * d + k] - mean) ** 2;
        const denominator = Math.sqrt(variance / d + this.eps);
        for (let k = 0; k < d; k++) {
          y[i * d + k] = (this.weight[k] * (x[i * d + k] - mean)) / denominator + this.bias[k];
        }
      }
      return y;
    }
  }

  // Chapter 1's multi-head attention (section 3.2.2): h scaled dot-product attentions side by
  // side. Each call leaves its weights in `weights`, (h, len_q, len_k) as arrays of rows, for the
  // page to draw (there is no fused kernel here that would skip them).
  class MultiHeadAttention {
    constructor(weights, name, config) {
      const { d_model, h, d_k, d_v } = config;
      Object.assign(this, { d_model, h, d_k, d_v });
      this.w_q = Linear.from(weights, `${name}.w_q`, d_model, h * d_k);
      this.w_k = Linear.from(weights, `${name}.w_k`, d_model, h * d_k);
      this.w_v = Linear.from(weights, `${name}.w_v`, d_model, h * d_v);
      this.w_o = Linear.from(weights, `${name}.w_o`, h * d_v, d_model);
      this.weights = null;
    }

    // query (len_q, d_model), key and value (len_k, d_model) -> (len_q, d_model). `mask`: null,
    // every key seen; or { first: p }, the queries are target positions p, p + 1, ... and each
    // sees the keys up to its own position (chapter 1's subsequent mask). `cache` (chapter 6's
    // KeyValueCache) supplies the keys and values of earlier calls.
    forward(query, len_q, key, value, len_k, mask, cache) {
      const { h, d_k, d_v } = this;
      const q = this.w_q.forward(query, len_q);
      const { k, v, length } = cache
        ? cache.keysValues(this, key, value, len_k)
        : this.projectKeysValues(key, value, len_k);
      const heads = new Float64Array(len_q * h * d_v); // Concat(head_1, ..., head_h)
      const weights = [];
      const scale = Math.sqrt(d_k);
      for (let head = 0; head < h; head++) {
        const rows = [];
        for (let i = 0; i < len_q; i++) {
          const seen = mask ? Math.min(length, mask.first + i + 1) : length;
          const scores = new Float64Array(length).fill(-Infinity);
          const qi = i * h * d_k + head * d_k;
          for (let j = 0; j < seen; j++) {
            const kj = j * h * d_k + head * d_k;
            let dot = 0;
            for (let c = 0; c < d_k; c++) dot += q[qi + c] * k[kj + c];
            scores[j] = dot / scale;
          }
          softmaxInPlace(scores);
          const out = i * h * d_v + head * d_v;
          for (let j = 0; j < seen; j++) {
            const [a, vj] = [scores[j], j * h * d_v + head * d_v];
            for (let c = 0; c < d_v; c++) heads[out + c] += a * v[vj + c];
          }
          rows.push(scores);
        }
        weights.push(rows);
      }
      this.weights = weights;
      return this.w_o.forward(heads, len_q);
    }

    // key, value (len_k, d_model) -> K (len_k, h * d_k) and V (len_k, h * d_v).
    projectKeysValues(key, value, len_k) {
      return { k: this.w_k.forward(key, len_k), v: this.w_v.forward(value, len_k), length: len_k };
    }
  }

  function softmaxInPlace(row) {
    let max = -Infinity;
    for (const v of row) if (v > max) max = v;
    let sum = 0;
    for (let i = 0; i < row.length; i++) {
      row[i] = Math.exp(row[i] - max);
      sum += row[i];
    }
    for (let i = 0; i < row.length; i++) row[i] /= sum;
    return row;
  }

  function add(a, b) {
    const y = new Float64Array(a.length);
    for (let i = 0; i < a.length; i++) y[i] = a[i] + b[i];
    return y;
  }

  // The residual connection and layer norm around one sub-layer: the paper's
  // LayerNorm(x + Sublayer(x)), or with norm_first x + Sublayer(LayerNorm(x)).
  class SublayerConnection {
    constructor(weights, name, d_model, norm_first) {
      this.norm = new LayerNorm(weights, `${name}.norm`, d_model);
      this.norm_first = norm_first;
    }

    forward(x, n, sublayer) {
      if (this.norm_first) return add(x, sublayer(this.norm.forward(x, n)));
      return this.norm.forward(add(x, sublayer(x)), n);
    }
  }

  // Equation 2: FFN(x) = max(0, x W1 + b1) W2 + b2, at each position.
  class PositionwiseFeedForward {
    constructor(weights, name, { d_model, d_ff }) {
      this.w_1 = Linear.from(weights, `${name}.w_1`, d_model, d_ff);
      this.w_2 = Linear.from(weights, `${name}.w_2`, d_ff, d_model);
    }

    forward(x, n) {
      const hidden = this.w_1.forward(x, n);
      for (let i = 0; i < hidden.length; i++) if (hidden[i] < 0) hidden[i] = 0;
      return this.w_2.forward(hidden, n);
    }
  }

  function sublayers(weights, name, count, { d_model, norm_first }) {
    const make = (i) =>
      new SublayerConnection(weights, `${name}.sublayers.${i}`, d_model, norm_first);
    return Array.from({ length: count }, (_, i) => make(i));
  }

  // Self-attention, then feed-forward, each inside a SublayerConnection.
  class EncoderLayer {
    constructor(weights, name, config) {
      const at = (part) => `${name}.${part}`;
      this.self_attn = new MultiHeadAttention(weights, at("self_attn"), config);
      this.feed_forward = new PositionwiseFeedForward(weights, at("feed_forward"), config);
      this.sublayers = sublayers(weights, name, 2, config);
    }

    forward(x, n) {
      x = this.sublayers[0].forward(x, n, (y) => this.self_attn.forward(y, n, y, y, n, null, null));
      return this.sublayers[1].forward(x, n, (y) => this.feed_forward.forward(y, n));
    }
  }

  // Masked self-attention, encoder-decoder attention, then feed-forward.
  class DecoderLayer {
    constructor(weights, name, config) {
      const at = (part) => `${name}.${part}`;
      this.self_attn = new MultiHeadAttention(weights, at("self_attn"), config);
      this.src_attn = new MultiHeadAttention(weights, at("src_attn"), config);
      this.feed_forward = new PositionwiseFeedForward(weights, at("feed_forward"), config);
      this.sublayers = sublayers(weights, name, 3, config);
    }

    // x (n, d_model), memory (src_len, d_model) -> (n, d_model). `cache` (chapter 6): the keys
    // and values of this layer's two attentions from earlier steps.
    forward(x, n, memory, src_len, tgt_mask, cache) {
      const [own, source] = cache || [null, null];
      const ownAttention = (y) => this.self_attn.forward(y, n, y, y, n, tgt_mask, own);
      const srcAttention = (y) =>
        this.src_attn.forward(y, n, memory, memory, src_len, null, source);
      x = this.sublayers[0].forward(x, n, ownAttention);
      x = this.sublayers[1].forward(x, n, srcAttention);
      return this.sublayers[2].forward(x, n, (y) => this.feed_forward.forward(y, n));
    }
  }

  // N encoder layers; with pre-norm, a final LayerNorm (post-norm layers end normalized already).
  class Encoder {
    constructor(weights, config) {
      this.layers = Array.from(
        { length: config.N },
        (_, l) => new EncoderLayer(weights, `encoder.layers.${l}`, config),
      );
      this.norm = config.norm_first ? new LayerNorm(weights, "encoder.norm", config.d_model) : null;
    }

    forward(x, n) {
      for (const layer of this.layers) x = layer.forward(x, n);
      return this.norm ? this.norm.forward(x, n) : x;
    }
  }

  // N decoder layers, each attending to the same encoder output; a final LayerNorm with pre-norm.
  class Decoder {
    constructor(weights, config) {
      this.layers = Array.from(
        { length: config.N },
        (_, l) => new DecoderLayer(weights, `decoder.layers.${l}`, config),
      );
      this.norm = config.norm_first ? new LayerNorm(weights, "decoder.norm", config.d_model) : null;
    }

    forward(x, n, memory, src_len, tgt_mask, cache) {
      this.layers.forEach((layer, index) => {
        x = layer.forward(x, n, memory, src_len, tgt_mask, cache ? cache.layers[index] : null);
      });
      return this.norm ? this.norm.forward(x, n) : x;
    }
  }

  // Token ids -> vectors times sqrt(d_model) (section 3.4), each rounded to float32 as PyTorch's
  // product is: (len, d_model).
  class Embeddings {
    constructor(lut, d_model) {
      this.lut = lut;
      this.d_model = d_model;
      this.scale = Math.fround(Math.sqrt(d_model));
    }

    forward(tokens) {
      const d = this.d_model;
      const x = new Float64Array(tokens.length * d);
      tokens.forEach((id, i) => {
        for (let k = 0; k < d; k++) x[i * d + k] = Math.fround(this.lut[id * d + k] * this.scale);
      });
      return x;
    }
  }

  // Section 3.5's sinusoids added to the input, x's first row being position `start`; computed
  // in double and rounded to float32 as the book's table is, and as long as the input needs.
  class PositionalEncoding {
    constructor(d_model) {
      this.d_model = d_model;
      this.table = [];
    }

    row(position) {
      while (this.table.length <= position) {
        const [pos, d] = [this.table.length, this.d_model];
        const row = new Float64Array(d);
        for (let i = 0; i < d; i += 2) {
          const angle = pos * Math.pow(10000, -i / d);
          row[i] = Math.fround(Math.sin(angle));
          row[i + 1] = Math.fround(Math.cos(angle));
        }
        this.table.push(row);
      }
      return this.table[position];
    }

    forward(x, n, start) {
      const d = this.d_model;
      for (let i = 0; i < n; i++) {
        const row = this.row(start + i);
        for (let k = 0; k < d; k++) x[i * d + k] += row[k];
      }
      return x;
    }
  }

  // Table 3's row E: a trained vector per position, added to the input; max_len of them.
  class LearnedPositions {
    constructor(weights, name, d_model, max_len) {
      this.table = weights.take(`${name}.table.weight`, [max_len, d_model]);
      Object.assign(this, { d_model, max_len });
    }

    forward(x, n, start) {
      const d = this.d_model;
      if (start + n > this.max_len) {
        throw new Error(
          `position ${start + n - 1} is past the model's ${this.max_len} learned positions`,
        );
      }
      for (let i = 0; i < n * d; i++) x[i] += this.table[start * d + i];
      return x;
    }
  }

  // The Transformer of Figure 1: embeddings, encoder, decoder and the output projection.
  class EncoderDecoder {
    constructor(config, weights) {
      this.config = config;
      const { d_model, max_len } = config;
      const table = (side, vocab) =>
        weights.take(`${side}_embed.0.lut.weight`, [config[vocab], d_model]);
      const positions = (side) =>
        config.learned_positions
          ? new LearnedPositions(weights, `${side}_embed.1`, d_model, max_len)
          : new PositionalEncoding(d_model);
      const target = table("tgt", "tgt_vocab");
      // share_embeddings: one matrix for both embeddings and the generator, which the export
      // writes once, as the target embedding.
      const source = config.share_embeddings ? target : table("src", "src_vocab");
      this.src_embed = [new Embeddings(source, d_model), positions("src")];
      this.tgt_embed = [new Embeddings(target, d_model), positions("tgt")];
      this.encoder = new Encoder(weights, config);
      this.decoder = new Decoder(weights, config);
      // The pre-softmax projection: the target embedding's matrix when tied (the export then
      // leaves its weight out), or a matrix of its own.
      const tied = config.share_embeddings || config.tie_target_embeddings;
      const why = "the output projection, with tie_target_embeddings and share_embeddings false";
      const shape = [config.tgt_vocab, d_model];
      const weight = tied ? target : weights.take("generator.weight", shape, why);
      const bias = weights.take("generator.bias", [config.tgt_vocab]);
      this.generator = new Linear(weight, bias, d_model, config.tgt_vocab, weights.linear);
    }

    // src ids (</s> included) -> memory (src_len, d_model).
    encode(src) {
      const [embed, position] = this.src_embed;
      return this.encoder.forward(position.forward(embed.forward(src), src.length, 0), src.length);
    }

    // tgt ids -> decoder states (tgt.length, d_model). With a `cache` (chapter 6's DecoderCache),
    // tgt holds only the positions after the cache.length ones already cached, numbered from
    // there; each position sees itself and those before it.
    decode(memory, src_len, tgt, cache) {
      const [embed, position] = this.tgt_embed;
      const start = cache ? cache.length : 0;
      const x = position.forward(embed.forward(tgt), tgt.length, start);
      return this.decoder.forward(x, tgt.length, memory, src_len, { first: start }, cache);
    }

    // Logits (tgt.length, tgt_vocab) for the token after each target position.
    forward(src, tgt) {
      const memory = this.encode(src);
      return this.generator.forward(this.decode(memory, src.length, tgt, null), tgt.length);
    }
  }

  // --- chapter 6's searches ----------------------------------------------------------------------

  // The keys and values one attention has projected so far. grow (decoder self-attention): each
  // call appends its new positions'. Not grow (encoder-decoder attention): the first call
  // projects the encoder output, later calls reuse it.
  class KeyValueCache {
    constructor(grow) {
      Object.assign(this, { grow, k: null, v: null, length: 0 });
    }

    keysValues(attention, key, value, len_k) {
      if (this.grow || this.k === null) {
        const fresh = attention.projectKeysValues(key, value, len_k);
        const grown = this.grow && this.k !== null;
        this.k = grown ? concat(this.k, fresh.k) : fresh.k;
        this.v = grown ? concat(this.v, fresh.v) : fresh.v;
        this.length = grown ? this.length + len_k : len_k;
      }
      return this;
    }

    copy() {
      const copy = new KeyValueCache(this.grow);
      return Object.assign(copy, { k: this.k, v: this.v, length: this.length });
    }
  }

  function concat(a, b) {
    const y = new Float64Array(a.length + b.length);
    y.set(a);
    y.set(b, a.length);
    return y;
  }

  // One (self-attention, encoder-decoder attention) pair of caches per decoder layer. Beam
  // search's select() of rows becomes branch(): a cache of its own for each hypothesis.
  class DecoderCache {
    constructor(model) {
      this.layers = model.decoder.layers.map(() => [
        new KeyValueCache(true),
        new KeyValueCache(false),
      ]);
    }

    // Target positions decoded so far.
    get length() {
      return this.layers[0][0].length;
    }

    // A copy that grows on its own, the source's keys and values shared (the arrays are only
    // ever replaced, never written).
    branch() {
      return this.withLayers(this.layers.map(([own, source]) => [own.copy(), source]));
    }

    // No target position yet, the source's keys and values shared: another target, same source.
    sameSource() {
      return this.withLayers(
        this.layers.map(([own, source]) => [new KeyValueCache(own.grow), source]),
      );
    }

    withLayers(layers) {
      const cache = Object.create(DecoderCache.prototype);
      cache.layers = layers;
      return cache;
    }
  }

  function logSoftmax(logits) {
    let max = -Infinity;
    for (const v of logits) if (v > max) max = v;
    let sum = 0;
    for (const v of logits) sum += Math.exp(v - max);
    const shift = max + Math.log(sum);
    return logits.map((v) => v - shift);
  }

  function topK(values, k) {
    const best = [];
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (best.length < k || v > best[best.length - 1].value) {
        let at = best.length;
        while (at > 0 && best[at - 1].value < v) at--; // ties keep the lower index first
        best.splice(at, 0, { index: i, value: v });
        if (best.length > k) best.pop();
      }
    }
    return best;
  }

  // The sentence's encoding, with its layers' attention weights.
  function encoded(model, src) {
    const memory = model.encode(src);
    return {
      memory,
      length: src.length,
      weights: model.encoder.layers.map((l) => l.self_attn.weights),
    };
  }

  // One decoder step or pass, with every layer's self and source attention weights.
  function decoded(model, source, tgt, cache) {
    const states = model.decode(source.memory, source.length, tgt, cache);
    const layers = model.decoder.layers;
    return {
      states,
      self: layers.map((l) => l.self_attn.weights),
      cross: layers.map((l) => l.src_attn.weights),
    };
  }

  // The attention weights of a pass over a whole output at once ([<s>, ...output]): chapter 7's
  // attention_maps, the encoder's reused.
  function outputMaps(model, source, cache, tgt) {
    const d = decoded(model, source, tgt, cache.sameSource());
    return { encoder: source.weights, decoderSelf: d.self, decoderSource: d.cross };
  }

  // Chapter 6's greedy_decode_cached for one sentence: the ids up to </s> (left out), and at each
  // step the five likeliest next words with their probabilities. The attention weights are kept
  // as it goes: step t's are row t of chapter 7's attention_maps (the cache computes the same
  // rows as a pass over the whole output would).
  function greedyDecodeCached(model, src, specials, max_len) {
    const source = encoded(model, src);
    const cache = new DecoderCache(model);
    const [out, steps, kept] = [[], [], []];
    let newest = specials.bos;
    for (let step = 1; step <= max_len; step++) {
      const d = decoded(model, source, [newest], cache);
      kept.push(d);
      const logits = model.generator.forward(d.states, 1);
      const top = topK(logits, 5); // the first is the argmax (the lower id on a tie, as torch)
      const logProbs = logSoftmax(logits);
      steps.push(top.map((t) => ({ id: t.index, p: Math.exp(logProbs[t.index]) })));
      newest = top[0].index;
      if (newest === specials.eos) break;
      out.push(newest);
    }
    const length = out.length + 1; // the positions of [<s>, ...out]
    let maps;
    if (kept.length === length) {
      const { N, h } = model.config;
      const rows = (which) =>
        Array.from({ length: N }, (_, l) =>
          Array.from({ length: h }, (_, head) =>
            kept.map((d) => padded(d[which][l][head][0], length)),
          ),
        );
      maps = { encoder: source.weights, decoderSelf: rows("self"), decoderSource: rows("cross") };
    } else {
      maps = outputMaps(model, source, cache, [specials.bos, ...out]); // stopped at the limit
    }
    return { ids: out, steps, maps };
  }

  function padded(row, length) {
    const full = new Float64Array(length);
    full.set(row.subarray(0, Math.min(row.length, length)));
    return full;
  }

  // GNMT's length penalty, as chapter 6 (section 6.1): ((5 + |Y|) / 6) ** alpha.
  function lengthPenalty(length, alpha) {
    return Math.pow((5 + length) / 6, alpha);
  }

  // Chapter 6's beam_search for one sentence, step for step: the 2k best extensions of the beam,
  // those ending within the best k set aside (until k have finished), the k best others kept.
  // Returns the winner's ids (</s> left out), and the trace: each step's candidates, each
  // {tokens, parent, score, finished, kept}, as chapter 6's BeamCandidate.
  function beamSearch(model, src, specials, max_len, beam, alpha) {
    const source = encoded(model, src);
    const root = new DecoderCache(model);
    let hyps = [{ tokens: [], score: 0, cache: root }]; // the live hypotheses
    let [bestScore, best, finished] = [-Infinity, [], 0];
    const trace = [];
    for (let step = 1; step <= max_len; step++) {
      // Every live hypothesis extended by every word: keep the 2k best (ties: the earlier first).
      const candidates = [];
      hyps.forEach((hyp, parent) => {
        const last = hyp.tokens.length ? hyp.tokens[hyp.tokens.length - 1] : specials.bos;
        const states = model.decode(source.memory, source.length, [last], hyp.cache);
        const logProbs = logSoftmax(model.generator.forward(states, 1));
        for (const t of topK(logProbs, 2 * beam)) {
          const order = parent * logProbs.length + t.index;
          candidates.push({ parent, word: t.index, score: hyp.score + t.value, order });
        }
      });
      candidates.sort((a, b) => b.score - a.score || a.order - b.order);
      const top = candidates.slice(0, 2 * beam);
      const open = finished < beam; // as the search checks it: once per step
      top.forEach((c, j) => {
        c.ends = c.word === specials.eos || step === max_len;
        c.finishing = c.ends && j < beam && open;
        if (c.finishing) {
          finished += 1;
          const penalized = c.score / lengthPenalty(step, alpha);
          if (penalized > bestScore) {
            bestScore = penalized;
            best = hyps[c.parent].tokens.concat([c.word]);
          }
        }
      });
      const kept = top.filter((c) => !c.ends).slice(0, beam);
      const done = finished >= beam;
      trace.push(
        top.map((c) => ({
          tokens: hyps[c.parent].tokens.concat([c.word]),
          parent: c.parent,
          score: c.score,
          finished: c.finishing,
          kept: done ? null : kept.indexOf(c) >= 0 ? kept.indexOf(c) : null,
        })),
      );
      if (done) break;
      hyps = kept.map((c) => ({
        tokens: hyps[c.parent].tokens.concat([c.word]),
        score: c.score,
        cache: hyps[c.parent].cache.branch(),
      }));
      if (!hyps.length) break;
    }
    const ids = best[best.length - 1] === specials.eos ? best.slice(0, -1) : best;
    const maps = outputMaps(model, source, root, [specials.bos, ...ids]);
    return { ids, trace, score: bestScore, maps };
  }

  // Chapter 6's copy_unknowns: each <unk> of the output becomes the source word that the last
  // layer's source attention, averaged over the heads, weighs most (among the words, not </s>).
  function copyUnknowns(words, outIds, cross, unk) {
    const last = cross[cross.length - 1]; // (h, positions, source length)
    return outIds.map((id, position) => {
      if (id !== unk) return null;
      let [bestWord, bestWeight] = [0, -Infinity];
      for (let j = 0; j < words.length; j++) {
        let mean = 0;
        for (const head of last) mean += head[position][j];
        mean /= last.length;
        if (mean > bestWeight) {
          bestWeight = mean;
          bestWord = j;
        }
      }
      return words[bestWord];
    });
  }

  // --- what the page calls ---------------------------------------------------------------------

  // The exported model with the target side's special tokens: chapter 6's Translator, for ids.
  class Translator {
    constructor(manifest, bytes) {
      const config = modelConfig(manifest); // refuses before the weights are read
      const weights = new Weights(manifest, bytes);
      this.model = new EncoderDecoder(config, weights);
      weights.checkAllTaken();
      this.manifest = manifest;
      this.specials = manifest.specials.tgt;
      this.kernel = weights.kernel;
    }

    greedy(srcIds, maxLen) {
      return greedyDecodeCached(this.model, srcIds, this.specials, maxLen);
    }

    beamSearch(srcIds, beam, alpha, maxLen) {
      return beamSearch(this.model, srcIds, this.specials, maxLen, beam, alpha);
    }

    // The whole model over a source and a target ([<s>, ...output]) at once, every attention
    // weight kept: chapter 7's attention_maps.
    attentionMaps(srcIds, tgtIds) {
      return outputMaps(
        this.model,
        encoded(this.model, srcIds),
        new DecoderCache(this.model),
        tgtIds,
      );
    }

    copyUnknowns(words, srcIds, outIds, cross) {
      return copyUnknowns(words, outIds, cross, this.specials.unk);
    }
  }

  function load(manifest, bytes) {
    return new Translator(manifest, bytes);
  }

  window.AnnotatedTransformer = {
    load,
    modelConfig,
    SETTINGS,
    UnsupportedModel,
    Translator,
    EncoderDecoder,
    DecoderCache,
    lengthPenalty,
    halfToFloat,
  };
})();
