// Chapter 7's Transformer, computed in the reader's browser: the forward pass of chapter 2 (post-norm
// layers, chapter 2's LayerNorm), chapter 6's cached greedy decoding and beam search, and chapter 6's
// copying of <unk>, over the weights annotated/browser_model.py exports (site/try/model.bin).
//
// A plain script (not a module), so that the page also works opened from disk (file://), where
// module scripts do not load. It defines window.AnnotatedTransformer = { load, Model }.
//
// Numbers: the weights are float32 (dequantized once on load); every sum is a JavaScript double,
// so the results are a little closer to exact than PyTorch's float32 sums, and agree with them to
// about 1e-6. Shapes are written as in the book: (positions, features), row-major.
(function () {
  "use strict";

  function halfToFloat(bits) {
    const sign = bits & 0x8000 ? -1 : 1;
    const exponent = (bits >> 10) & 0x1f;
    const fraction = bits & 0x3ff;
    if (exponent === 0) return sign * fraction * Math.pow(2, -24); // subnormal
    if (exponent === 31) return fraction ? NaN : sign * Infinity;
    return sign * (1 + fraction / 1024) * Math.pow(2, exponent - 15);
  }

  // One tensor of the export: float32 as stored, or integers of `bits` bits times a scale per
  // group of `group` along each row, a float16 times 2^-shift (annotated/browser_model.py).
  function readTensor(bytes, entry) {
    const count = entry.shape.reduce((a, b) => a * b, 1);
    const view = new DataView(bytes.buffer, bytes.byteOffset + entry.offset, entry.bytes);
    const out = new Float32Array(count);
    if (entry.bits === 32) {
      for (let i = 0; i < count; i++) out[i] = view.getFloat32(4 * i, true);
      return out;
    }
    const bits = entry.bits,
      group = entry.group,
      scales = count / group;
    const scale = new Float64Array(scales);
    const unit = Math.pow(2, -entry.shift); // the matrix's power of two (browser_model.py)
    for (let g = 0; g < scales; g++) scale[g] = halfToFloat(view.getUint16(2 * g, true)) * unit;
    const start = entry.offset + 2 * scales,
      end = entry.offset + entry.bytes;
    const stream = new Uint8Array(end - start + 3); // room to read three bytes past the last value
    stream.set(bytes.subarray(start, end));
    const mask = (1 << bits) - 1,
      half = 1 << (bits - 1);
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
    const zeros = take(8192),
      x = take(SCRATCH),
      y = take(SCRATCH);
    return {
      take,
      linear(input, n, dIn, w, b, dOut) {
        if (dOut > 8192 || dIn > SCRATCH || dOut > SCRATCH)
          return linear(input, n, dIn, w, b, dOut);
        const out = new Float64Array(n * dOut);
        const rows = Math.max(1, Math.floor(SCRATCH / Math.max(dIn, dOut)));
        for (let start = 0; start < n; start += rows) {
          const count = Math.min(rows, n - start);
          x.set(input.subarray(start * dIn, (start + count) * dIn));
          instance.exports.linear(
            x.byteOffset,
            count,
            dIn,
            w.byteOffset,
            (b || zeros).byteOffset,
            dOut,
            y.byteOffset,
          );
          out.set(y.subarray(0, count * dOut), start * dOut);
        }
        return out;
      },
    };
  }

  // Chapter 2's LayerNorm: mean 0 and (biased) variance 1 over the features, eps inside the root.
  function layerNorm(x, n, d, norm) {
    const y = new Float64Array(n * d);
    for (let i = 0; i < n; i++) {
      let mean = 0;
      for (let k = 0; k < d; k++) mean += x[i * d + k];
      mean /= d;
      let variance = 0;
      for (let k = 0; k < d; k++) variance += (x[i * d + k] - mean) ** 2;
      const denominator = Math.sqrt(variance / d + 1e-5);
      for (let k = 0; k < d; k++) {
        y[i * d + k] = (norm.weight[k] * (x[i * d + k] - mean)) / denominator + norm.bias[k];
      }
    }
    return y;
  }

  function add(a, b) {
    const y = new Float64Array(a.length);
    for (let i = 0; i < a.length; i++) y[i] = a[i] + b[i];
    return y;
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

  class Model {
    constructor(manifest, bytes) {
      this.manifest = manifest;
      const m = manifest.model;
      this.d = m.d_model;
      this.h = m.h;
      this.dK = m.d_k || m.d_model / m.h;
      this.N = m.N;
      this.dFF = m.d_ff;
      this.w = {};
      const floats = manifest.tensors.reduce(
        (sum, e) => sum + e.shape.reduce((a, b) => a * b, 1),
        0,
      );
      let kernel = null;
      try {
        kernel = typeof WebAssembly === "object" ? wasmKernel(floats) : null;
      } catch (error) {
        kernel = null; // no SIMD here (an older browser): the plain loops do the same work
      }
      this.linear = kernel ? kernel.linear : linear;
      this.kernel = kernel ? "WebAssembly SIMD" : "JavaScript";
      for (const entry of manifest.tensors) {
        const values = readTensor(bytes, entry);
        this.w[entry.name] = kernel ? kernel.take(values.length) : values;
        if (kernel) this.w[entry.name].set(values);
      }
      this.w["generator.weight"] = this.w["tgt_embed.0.lut.weight"]; // tied (chapter 7)
      this.tgtVocab = manifest.vocab.tgt.length;
      this.positions = [];
    }

    attentionWeights(prefix) {
      const w = this.w;
      const get = (name) => ({
        weight: w[`${prefix}.${name}.weight`],
        bias: w[`${prefix}.${name}.bias`],
      });
      return { q: get("w_q"), k: get("w_k"), v: get("w_v"), o: get("w_o") };
    }

    norm(prefix) {
      return { weight: this.w[`${prefix}.norm.weight`], bias: this.w[`${prefix}.norm.bias`] };
    }

    // Section 3.5's sinusoids, computed in double and rounded to float32 as the book's table is.
    position(p) {
      while (this.positions.length <= p) {
        const pos = this.positions.length,
          row = new Float64Array(this.d);
        for (let i = 0; i < this.d; i += 2) {
          const angle = pos * Math.pow(10000, -i / this.d);
          row[i] = Math.fround(Math.sin(angle));
          row[i + 1] = Math.fround(Math.cos(angle));
        }
        this.positions.push(row);
      }
      return this.positions[p];
    }

    // Token ids -> embeddings times sqrt(d_model) (rounded to float32, as PyTorch's product is),
    // plus the position of each, starting at `start`.
    embed(side, ids, start) {
      const table = this.w[`${side}_embed.0.lut.weight`],
        d = this.d;
      const scale = Math.fround(Math.sqrt(d));
      const x = new Float64Array(ids.length * d);
      ids.forEach((id, i) => {
        const pos = this.position(start + i);
        for (let k = 0; k < d; k++) x[i * d + k] = Math.fround(table[id * d + k] * scale) + pos[k];
      });
      return x;
    }

    project(x, n, p) {
      return this.linear(x, n, this.d, p.weight, p.bias, p.weight.length / this.d);
    }

    // Multi-head attention of nq queries over nk keys/values already projected (k, v: (nk, h*d_k)).
    // `causal`: query i sees keys 0..offset+i. Returns the output (nq, d_model) and the weights
    // (h, nq, nk) when `keep` is true.
    attend(p, x, nq, k, v, nk, causal, offset, keep) {
      const h = this.h,
        dK = this.dK,
        width = h * dK;
      const q = this.project(x, nq, p.q);
      const heads = new Float64Array(nq * width);
      const weights = keep ? [] : null;
      const scale = Math.sqrt(dK);
      for (let head = 0; head < h; head++) {
        const rows = keep ? [] : null;
        for (let i = 0; i < nq; i++) {
          const visible = causal ? Math.min(nk, offset + i + 1) : nk;
          const scores = new Float64Array(nk).fill(-Infinity);
          for (let j = 0; j < visible; j++) {
            let dot = 0;
            for (let c = 0; c < dK; c++)
              dot += q[i * width + head * dK + c] * k[j * width + head * dK + c];
            scores[j] = dot / scale;
          }
          softmaxInPlace(scores);
          for (let j = 0; j < visible; j++) {
            const a = scores[j];
            for (let c = 0; c < dK; c++)
              heads[i * width + head * dK + c] += a * v[j * width + head * dK + c];
          }
          if (keep) rows.push(scores);
        }
        if (keep) weights.push(rows);
      }
      return { out: this.linear(heads, nq, width, p.o.weight, p.o.bias, this.d), weights };
    }

    feedForward(prefix, x, n) {
      const w = this.w,
        hidden = this.linear(
          x,
          n,
          this.d,
          w[`${prefix}.w_1.weight`],
          w[`${prefix}.w_1.bias`],
          this.dFF,
        );
      for (let i = 0; i < hidden.length; i++) if (hidden[i] < 0) hidden[i] = 0;
      return this.linear(
        hidden,
        n,
        this.dFF,
        w[`${prefix}.w_2.weight`],
        w[`${prefix}.w_2.bias`],
        this.d,
      );
    }

    // The encoder: source ids (</s> included) -> memory (n, d_model), and each layer's weights.
    encode(ids, keep) {
      const n = ids.length;
      let x = this.embed("src", ids, 0);
      const weights = [];
      for (let l = 0; l < this.N; l++) {
        const prefix = `encoder.layers.${l}`;
        const p = this.attentionWeights(`${prefix}.self_attn`);
        const k = this.project(x, n, p.k),
          v = this.project(x, n, p.v);
        const a = this.attend(p, x, n, k, v, n, false, 0, keep);
        if (keep) weights.push(a.weights);
        x = layerNorm(add(x, a.out), n, this.d, this.norm(`${prefix}.sublayers.0`));
        x = layerNorm(
          add(x, this.feedForward(`${prefix}.feed_forward`, x, n)),
          n,
          this.d,
          this.norm(`${prefix}.sublayers.1`),
        );
      }
      return { memory: x, length: n, weights };
    }

    // The keys and values of every layer's source attention: computed once per sentence.
    sourceCache(encoded) {
      const layers = [];
      for (let l = 0; l < this.N; l++) {
        const p = this.attentionWeights(`decoder.layers.${l}.src_attn`);
        layers.push({
          k: this.project(encoded.memory, encoded.length, p.k),
          v: this.project(encoded.memory, encoded.length, p.v),
        });
      }
      return layers;
    }

    // The decoder over `ids` (positions start.. of one hypothesis), with `state` holding the keys
    // and values of its earlier positions (chapter 6's cache; grown in place). Returns the
    // states (n, d_model), and with `keep` every layer's self and source attention weights.
    decode(encoded, source, ids, state, keep) {
      const n = ids.length,
        start = state.length,
        d = this.d;
      let x = this.embed("tgt", ids, start);
      const self = [],
        cross = [];
      for (let l = 0; l < this.N; l++) {
        const prefix = `decoder.layers.${l}`;
        const p = this.attentionWeights(`${prefix}.self_attn`);
        const cache = state.layers[l];
        const k = this.project(x, n, p.k),
          v = this.project(x, n, p.v);
        cache.k = concat(cache.k, k);
        cache.v = concat(cache.v, v);
        const a = this.attend(p, x, n, cache.k, cache.v, start + n, true, start, keep);
        x = layerNorm(add(x, a.out), n, d, this.norm(`${prefix}.sublayers.0`));
        const s = this.attend(
          this.attentionWeights(`${prefix}.src_attn`),
          x,
          n,
          source[l].k,
          source[l].v,
          encoded.length,
          false,
          0,
          keep,
        );
        x = layerNorm(add(x, s.out), n, d, this.norm(`${prefix}.sublayers.1`));
        x = layerNorm(
          add(x, this.feedForward(`${prefix}.feed_forward`, x, n)),
          n,
          d,
          this.norm(`${prefix}.sublayers.2`),
        );
        if (keep) {
          self.push(a.weights);
          cross.push(s.weights);
        }
      }
      state.length += n;
      return { states: x, self, cross };
    }

    newState() {
      return {
        length: 0,
        layers: Array.from({ length: this.N }, () => ({
          k: new Float64Array(0),
          v: new Float64Array(0),
        })),
      };
    }

    // The logits of the last position's next word.
    logits(states, n) {
      const last = states.subarray((n - 1) * this.d, n * this.d);
      return this.linear(
        last,
        1,
        this.d,
        this.w["generator.weight"],
        this.w["generator.bias"],
        this.tgtVocab,
      );
    }
  }

  function concat(a, b) {
    const y = new Float64Array(a.length + b.length);
    y.set(a);
    y.set(b, a.length);
    return y;
  }

  function copyState(state) {
    return { length: state.length, layers: state.layers.map((c) => ({ k: c.k, v: c.v })) };
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

  // Chapter 6's greedy_decode_cached for one sentence: the ids up to </s> (left out), and at
  // each step the five likeliest next words with their probabilities.
  // The attention weights are kept as it goes: step t's are row t of chapter 7's attention_maps
  // (the cache computes the same rows as a pass over the whole output would).
  Model.prototype.greedy = function (srcIds, maxLen) {
    const specials = this.manifest.specials.tgt;
    const encoded = this.encode(srcIds, true),
      source = this.sourceCache(encoded);
    const state = this.newState(),
      out = [],
      steps = [],
      kept = [];
    let newest = specials.bos;
    for (let step = 1; step <= maxLen; step++) {
      const decoded = this.decode(encoded, source, [newest], state, true);
      const states = decoded.states;
      kept.push(decoded);
      const logits = this.logits(states, 1);
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
      const rows = (which) =>
        Array.from({ length: this.N }, (_, l) =>
          Array.from({ length: this.h }, (_, head) =>
            kept.map((d) => padded(d[which][l][head][0], length)),
          ),
        );
      maps = { encoder: encoded.weights, decoderSelf: rows("self"), decoderSource: rows("cross") };
    } else {
      maps = this.outputMaps(encoded, source, [specials.bos, ...out]); // stopped at the length limit
    }
    return { ids: out, steps, maps };
  };

  function padded(row, length) {
    const full = new Float64Array(length);
    full.set(row.subarray(0, Math.min(row.length, length)));
    return full;
  }

  // The weights of a pass over a whole output at once, the encoder's reused.
  Model.prototype.outputMaps = function (encoded, source, tgtIds) {
    const decoded = this.decode(encoded, source, tgtIds, this.newState(), true);
    return { encoder: encoded.weights, decoderSelf: decoded.self, decoderSource: decoded.cross };
  };

  // GNMT's length penalty, as chapter 6 (section 6.1): ((5 + |Y|) / 6) ** alpha.
  function lengthPenalty(length, alpha) {
    return Math.pow((5 + length) / 6, alpha);
  }

  // Chapter 6's beam_search for one sentence, step for step: the 2k best extensions of the beam,
  // those ending within the best k set aside (until k have finished), the k best others kept.
  // Returns the winner's ids (</s> left out), and the trace: each step's candidates, each
  // {tokens, parent, score, finished, kept}, as chapter 6's BeamCandidate.
  Model.prototype.beamSearch = function (srcIds, beam, alpha, maxLen) {
    const specials = this.manifest.specials.tgt;
    const encoded = this.encode(srcIds, true),
      source = this.sourceCache(encoded);
    let hyps = [{ tokens: [], score: 0, state: this.newState() }]; // the live hypotheses
    let bestScore = -Infinity,
      best = [],
      finished = 0;
    const trace = [];
    for (let step = 1; step <= maxLen; step++) {
      // Every live hypothesis extended by every word: keep the 2k best (ties: the earlier first).
      const candidates = [];
      hyps.forEach((hyp, parent) => {
        const last = hyp.tokens.length ? hyp.tokens[hyp.tokens.length - 1] : specials.bos;
        const { states } = this.decode(encoded, source, [last], hyp.state, false);
        const logProbs = logSoftmax(this.logits(states, 1));
        for (const t of topK(logProbs, 2 * beam)) {
          candidates.push({
            parent,
            word: t.index,
            score: hyp.score + t.value,
            order: parent * logProbs.length + t.index,
          });
        }
      });
      candidates.sort((a, b) => b.score - a.score || a.order - b.order);
      const top = candidates.slice(0, 2 * beam);
      const open = finished < beam; // as the search checks it: once per step
      const stepTrace = [];
      top.forEach((c, j) => {
        c.ends = c.word === specials.eos || step === maxLen;
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
      top.forEach((c) => {
        stepTrace.push({
          tokens: hyps[c.parent].tokens.concat([c.word]),
          parent: c.parent,
          score: c.score,
          finished: c.finishing,
          kept: done ? null : kept.indexOf(c) >= 0 ? kept.indexOf(c) : null,
        });
      });
      trace.push(stepTrace);
      if (done) break;
      hyps = kept.map((c) => ({
        tokens: hyps[c.parent].tokens.concat([c.word]),
        score: c.score,
        state: copyState(hyps[c.parent].state),
      }));
      if (!hyps.length) break;
    }
    const ids = best[best.length - 1] === specials.eos ? best.slice(0, -1) : best;
    const maps = this.outputMaps(encoded, source, [specials.bos, ...ids]);
    return { ids, trace, score: bestScore, maps };
  };

  // The whole model over a source and a target ([<s>, ...output]) at once, every attention weight
  // kept: chapter 7's attention_maps, and what copying <unk> reads.
  Model.prototype.attentionMaps = function (srcIds, tgtIds) {
    const encoded = this.encode(srcIds, true);
    return this.outputMaps(encoded, this.sourceCache(encoded), tgtIds);
  };

  // Chapter 6's copy_unknowns: each <unk> of the output becomes the source word that the last
  // layer's source attention, averaged over the heads, weighs most (among the words, not </s>).
  Model.prototype.copyUnknowns = function (words, srcIds, outIds, cross) {
    const specials = this.manifest.specials.tgt;
    const last = cross[cross.length - 1]; // (h, positions, source length)
    return outIds.map((id, position) => {
      if (id !== specials.unk) return null;
      let bestWord = 0,
        bestWeight = -Infinity;
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
  };

  function load(manifest, bytes) {
    return new Model(manifest, bytes);
  }

  window.AnnotatedTransformer = { load, Model, lengthPenalty, halfToFloat };
})();
