// spaCy's tokenizer (spacy/tokenizer.pyx), run in the browser over the rules that
// annotated/export/spacy_rules.py exports: the same tokens as the book's `tokenize` in Python
// (annotated/ch05_text.py), whitespace tokens dropped. tests/test_try_tokenizer.py checks it.
//
//   const tokenize = AnnotatedTokenizer.make(rules);  // rules: tokenizer_rules("de") as JSON
//   tokenize("Ein Mann, z.B. hier.");  // ["Ein", "Mann", ",", "z.B.", "hier", "."]
//
// A plain script, not a module, so that a page opened from disk (file://) can load it too.
// Offsets are JavaScript's (UTF-16 units), where Python counts code points; the patterns carry
// the u flag, so no match ever splits a character and the two agree.
(function () {
  "use strict";

  function make(rules) {
    const specials = new Map(Object.entries(rules.special_cases));
    const isSpaceChar = new RegExp(`^${rules.whitespace}$`, "u"); // Python's str.isspace
    const isSpace = new RegExp(`^${rules.whitespace}+$`, "u");
    const compile = (pattern, flags) => (pattern == null ? null : new RegExp(pattern, flags));
    const prefix = compile(rules.prefix, "u"); // anchored with ^ by spaCy
    const suffix = compile(rules.suffix, "u"); // anchored with $ by spaCy
    const infix = compile(rules.infix, "gu");
    // Python's re.match: anchored at the start only.
    const anchored = (pattern) => compile(pattern == null ? null : `^(?:${pattern})`, "u");
    const tokenMatch = anchored(rules.token_match);
    const urlMatch = anchored(rules.url_match);

    // The length of the match (Python: match.end() - match.start()), 0 for none.
    const find = (regex, string) => (regex && regex.exec(string)?.[0].length) || 0;
    const findInfixes = (string) =>
      infix ? Array.from(string.matchAll(infix), (m) => [m.index, m.index + m[0].length]) : [];

    // Tokenizer._split_affixes: strip prefixes and suffixes, one of each per round, until none
    // is left, or what is left (or what a prefix or suffix leaves) is a special case.
    function splitAffixes(string, prefixes, suffixes, withSpecials) {
      const special = (s) => withSpecials && specials.has(s);
      let lastSize = 0;
      while (string && string.length !== lastSize) {
        if ((tokenMatch && tokenMatch.test(string)) || special(string)) break;
        lastSize = string.length;
        const preLen = find(prefix, string);
        const pre = string.slice(0, preLen);
        const minusPre = string.slice(preLen);
        if (preLen && minusPre && special(minusPre)) {
          prefixes.push(pre);
          string = minusPre;
          break;
        }
        // The suffix is looked for after the prefix, but cut from the whole string.
        const sufLen = find(suffix, minusPre);
        const suf = string.slice(string.length - sufLen);
        const minusSuf = string.slice(0, string.length - sufLen);
        if (sufLen && minusSuf && special(minusSuf)) {
          suffixes.push(suf);
          string = minusSuf;
          break;
        }
        if (preLen && sufLen && preLen + sufLen <= string.length) {
          prefixes.push(pre);
          suffixes.push(suf);
          string = string.slice(preLen, string.length - sufLen);
        } else if (preLen) {
          // a prefix and a suffix that overlap: only the prefix goes
          prefixes.push(pre);
          string = minusPre;
        } else if (sufLen) {
          suffixes.push(suf);
          string = minusSuf;
        }
      }
      return string;
    }

    // Tokenizer._tokenize (_split_affixes, then _attach_tokens) for one run of non-space (or
    // space) characters, appending its tokens to `out`.
    function tokenizeChunk(chunk, withSpecials, out) {
      if (withSpecials && specials.has(chunk)) {
        out.push(...specials.get(chunk));
        return;
      }
      const prefixes = [];
      const suffixes = [];
      const string = splitAffixes(chunk, prefixes, suffixes, withSpecials);
      out.push(...prefixes);
      if (!string) {
        // nothing between the prefixes and the suffixes
      } else if (withSpecials && specials.has(string)) {
        out.push(...specials.get(string));
      } else if ((tokenMatch && tokenMatch.test(string)) || (urlMatch && urlMatch.test(string))) {
        out.push(string);
      } else {
        let start = 0;
        for (const [from, to] of findInfixes(string)) {
          if (from === 0) continue; // spaCy ignores an infix at the very start
          if (from !== start) out.push(string.slice(start, from));
          if (from !== to) out.push(string.slice(from, to));
          start = to;
        }
        if (start < string.length) out.push(string.slice(start));
      }
      out.push(...suffixes.reverse()); // the suffixes were found from the end inwards
    }

    // Tokenizer._tokenize_affixes: cut the text into runs of space and non-space characters
    // (Python's str.isspace). A run of space is a token too, except one single " ", which only
    // marks that the token before it is followed by a space (spaCy's `whitespace_`).
    function tokenizeAffixes(text, withSpecials) {
      const words = [];
      const spaces = [];
      const add = (start, end) => {
        tokenizeChunk(text.slice(start, end), withSpecials, words);
        while (spaces.length < words.length) spaces.push(false);
      };
      if (!text) return { words, spaces };
      let inSpace = isSpaceChar.test(text[0]);
      let start = 0;
      for (let i = 0; i < text.length; i++) {
        const char = text[i];
        if (isSpaceChar.test(char) === inSpace) continue;
        if (start < i) add(start, i);
        if (char === " ") {
          spaces[spaces.length - 1] = true;
          start = i + 1;
        } else {
          start = i;
        }
        inSpace = !inSpace;
      }
      if (start < text.length) add(start, text.length);
      return { words, spaces };
    }

    // spaCy's second pass over the tokens (Tokenizer._apply_special_cases): a PhraseMatcher finds
    // every run of tokens that spells a special case as the affix rules alone would cut it.
    // spaCy only looks for the special cases that contain a prefix, suffix, infix or space
    // (unless faster_heuristics is off). The patterns are kept in a trie of token texts.
    const trie = { next: new Map(), end: false };
    for (const string of specials.keys()) {
      const affixed = find(prefix, string) || findInfixes(string).length || find(suffix, string);
      if (rules.faster_heuristics && !affixed && !string.includes(" ")) continue;
      let node = trie;
      for (const word of tokenizeAffixes(string, false).words) {
        if (!node.next.has(word)) node.next.set(word, { next: new Map(), end: false });
        node = node.next.get(word);
      }
      node.end = node !== trie;
    }

    function applySpecialCases(words, spaces) {
      const matches = [];
      for (let start = 0; start < words.length; start++) {
        let node = trie;
        for (let end = start; end < words.length; end++) {
          node = node.next.get(words[end]);
          if (!node) break;
          if (node.end) matches.push([start, end + 1]);
        }
      }
      if (!matches.length) return words;
      // Tokenizer._filter_special_spans: longest first, then leftmost; a span is kept when its
      // first and last tokens are not in a span seen before, and its tokens count as seen even
      // when it is not kept.
      matches.sort((a, b) => b[1] - b[0] - (a[1] - a[0]) || a[0] - b[0]);
      const seen = new Set();
      const kept = new Map();
      for (const [start, end] of matches) {
        if (!seen.has(start) && !seen.has(end - 1)) kept.set(start, end);
        for (let i = start; i < end; i++) seen.add(i);
      }
      // Tokenizer._retokenize_special_spans: a span whose text (with the spaces between its
      // tokens) is a special case becomes that case's tokens; any other is left as it is.
      const out = [];
      for (let i = 0; i < words.length;) {
        const end = kept.get(i);
        if (end === undefined) {
          out.push(words[i++]);
          continue;
        }
        let text = "";
        for (let j = i; j < end; j++) text += words[j] + (j < end - 1 && spaces[j] ? " " : "");
        out.push(...(specials.get(text) || words.slice(i, end)));
        i = end;
      }
      return out;
    }

    return function tokenize(text) {
      const { words, spaces } = tokenizeAffixes(text, true);
      return applySpecialCases(words, spaces).filter((word) => !isSpace.test(word));
    };
  }

  window.AnnotatedTokenizer = { make };
})();
