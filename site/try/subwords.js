// SentencePiece's BPE encoder and its decoder, run in the browser over the piece table that
// annotated/export/sentencepiece_table.py exports from a chapter 5 `Subwords`: the same pieces
// and ids as Python's sentencepiece, the same text back. tests/test_try_subwords.py checks it on
// every Multi30k sentence, on hard strings and on random ones.
//
//   const subwords = AnnotatedSubwords.make(table);  // table: piece_table(subwords) as JSON
//   subwords.pieces("Ein Mann läuft.");  // ["▁Ein", "▁Mann", "▁läuft", "."]
//   subwords.encode("Ein Mann läuft.");  // their ids
//   subwords.decode(ids);                // "Ein Mann läuft."
//
// The book's own port, not a package: a build of the C++ library weighs 0.8 to 4 MB, and the
// encoder is chapter 5's merge loop in sixty lines. A plain script, not a module, so that a page
// opened from disk (file://) can load it too.
(function () {
  "use strict";

  const SPACE = "\u2581"; // ▁, which marks where a word starts
  const UNKNOWN_SURFACE = " \u2047 "; // what sentencepiece writes for <unk> when it decodes
  const REPLACEMENT = "\ufffd";

  function make(table) {
    const { pieces, scores, kinds } = table;
    // The pieces a merge may make (normal ones; user-defined and unused ones, which this book's
    // BPE models have none of, are refused by the export) and the others (control, <unk>, bytes).
    const mergeable = new Map();
    const reserved = new Map();
    pieces.forEach((piece, id) => {
      (kinds[id] === "normal" ? mergeable : reserved).set(piece, id);
    });
    const unk = kinds.indexOf("unknown");
    const idOf = (piece) => reserved.get(piece) ?? mergeable.get(piece) ?? unk;
    const byteIds = Array.from({ length: 256 }, (_, b) => {
      const piece = `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`;
      if (!reserved.has(piece)) throw new Error(`the table has no byte piece ${piece}`);
      return reserved.get(piece);
    });
    const byteOf = new Map(byteIds.map((id, b) => [id, b]));

    // The normalizer with the identity rule: spaces at the ends dropped, a run of spaces made
    // one, a space put in front, every space written as ▁, and ▁s at the end dropped.
    function normalize(text) {
      const collapsed = text.replace(/ +/g, " ").replace(/^ /, "");
      if (collapsed === "") return "";
      return (SPACE + collapsed.replaceAll(" ", SPACE)).replace(/\u2581+$/u, "");
    }

    // BPE: start from the characters, and merge, again and again, the neighbouring pair whose
    // join is a piece with the highest score (the earliest learned), the leftmost on a tie.
    function split(text) {
      const symbols = Array.from(normalize(text)); // code points
      for (;;) {
        let best = -1;
        let bestScore = -Infinity;
        for (let i = 0; i + 1 < symbols.length; i++) {
          const id = mergeable.get(symbols[i] + symbols[i + 1]);
          if (id !== undefined && scores[id] > bestScore) [best, bestScore] = [i, scores[id]];
        }
        if (best < 0) return symbols;
        symbols.splice(best, 2, symbols[best] + symbols[best + 1]);
      }
    }

    // A symbol that is no piece (a character never seen in training) is spelled as its UTF-8
    // bytes: byte fallback, so that nothing becomes <unk>.
    function encode(text) {
      const ids = [];
      const utf8 = new TextEncoder();
      for (const symbol of split(text)) {
        const id = idOf(symbol);
        if (id === unk) for (const b of utf8.encode(symbol)) ids.push(byteIds[b]);
        else ids.push(id);
      }
      return ids;
    }

    // UTF-8 decoded as sentencepiece decodes it: a byte that starts no valid character becomes
    // U+FFFD on its own, and decoding goes on at the next byte.
    function decodeBytes(bytes) {
      let out = "";
      let i = 0;
      const trail = (k) => i + k < bytes.length && (bytes[i + k] & 0xc0) === 0x80;
      const valid = (cp) => cp < 0xd800 || (cp >= 0xe000 && cp <= 0x10ffff);
      while (i < bytes.length) {
        const b = bytes[i];
        let cp = -1;
        let size = 1;
        if (b < 0x80) cp = b;
        else if ((b & 0xe0) === 0xc0 && trail(1)) {
          [cp, size] = [((b & 0x1f) << 6) | (bytes[i + 1] & 0x3f), 2];
          if (cp < 0x80) cp = -1;
        } else if ((b & 0xf0) === 0xe0 && trail(1) && trail(2)) {
          cp = ((b & 0x0f) << 12) | ((bytes[i + 1] & 0x3f) << 6) | (bytes[i + 2] & 0x3f);
          [cp, size] = [cp < 0x800 ? -1 : cp, 3];
        } else if ((b & 0xf8) === 0xf0 && trail(1) && trail(2) && trail(3)) {
          cp = ((b & 0x07) << 18) | ((bytes[i + 1] & 0x3f) << 12);
          cp |= ((bytes[i + 2] & 0x3f) << 6) | (bytes[i + 3] & 0x3f);
          [cp, size] = [cp < 0x10000 ? -1 : cp, 4];
        }
        if (cp < 0 || !valid(cp)) [out, i] = [out + REPLACEMENT, i + 1];
        else [out, i] = [out + String.fromCodePoint(cp), i + size];
      }
      return out;
    }

    // Ids -> text: control pieces vanish, <unk> is written " ⁇ ", runs of byte pieces become
    // their characters, ▁ becomes a space, and the text's first ▁ (the one normalize put in
    // front) is dropped.
    function decode(ids) {
      let text = "";
      let bytes = [];
      const flush = () => {
        text += decodeBytes(bytes);
        bytes = [];
      };
      for (const id of ids) {
        if (byteOf.has(id)) {
          bytes.push(byteOf.get(id));
          continue;
        }
        flush();
        const kind = kinds[id];
        if (kind === "control") continue;
        if (kind === "unknown") {
          text += UNKNOWN_SURFACE;
          continue;
        }
        let piece = pieces[id];
        if (text === "" && piece.startsWith(SPACE)) piece = piece.slice(SPACE.length);
        text += piece.replaceAll(SPACE, " ");
      }
      flush();
      return text;
    }

    return {
      encode,
      decode,
      pieces: (text) => encode(text).map((id) => pieces[id]), // as sentencepiece's out_type=str
      size: pieces.length,
    };
  }

  window.AnnotatedSubwords = { make };
})();
