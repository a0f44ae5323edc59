// The start-up of every chapter deck (tools/bookslides.py writes the decks and copies this file
// beside them). It runs before MathJax and reveal.js load.

var annotatedMathDone;
var annotatedMathTypeset = new Promise(function (resolve) { annotatedMathDone = resolve; });

// MathJax typesets the slides' \( \) and \[ \] (bookslides.py writes the chapters' $-math so);
// the speaker notes are left as the chapter wrote them, for the notes window has no MathJax.
window.MathJax = {
  tex: {inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]]},
  options: {ignoreHtmlClass: "notes|tex2jax_ignore"},
  startup: {
    pageReady: function () {
      return MathJax.startup.defaultPageReady().then(annotatedMathDone);
    },
  },
};

window.annotatedDeck = {
  // Draws the charts and typesets the equations, lays each slide out at its own size (a slide
  // too full for its box continues on the next), then starts reveal.js, which scales whole
  // slides to the window. Done before reveal.js starts, the layout is the same on every screen.
  start: function (size) {
    var boxes = Array.prototype.slice.call(document.querySelectorAll(".annotated-chart"));
    var drawn = boxes.map(function (box) {
      if (box.querySelector("svg, canvas")) return Promise.resolve();
      return new Promise(function (resolve) {
        box.addEventListener("annotated-chart-drawn", resolve, {once: true});
      });
    });
    // A chart that cannot be drawn says so in its box; the deck starts anyway.
    var late = new Promise(function (resolve) { setTimeout(resolve, 15000); });
    return Promise.race([Promise.all(drawn.concat([annotatedMathTypeset])), late]).then(function () {
      boxes.forEach(annotatedDeck.legible);
      document.querySelectorAll(".reveal .slides > section").forEach(annotatedDeck.paginate);
      return Reveal.initialize({
        width: size.width,
        height: size.height,
        margin: 0,  // a slide's own padding keeps text off the edges (deck.css)
        minScale: 0.2,
        maxScale: 3,
        center: false,
        hash: true,  // a reload stays on its slide
        transition: "none",
        backgroundTransition: "none",
        slideNumber: "c/t",
        plugins: [RevealNotes],  // "s" opens the speaker's window with each slide's notes
      });
    }).then(function () {
      document.documentElement.dataset.deckReady = "1";
    });
  },

  // A chart is drawn at the site's size, its labels smaller than the site's body text: on a slide
  // it is enlarged as a whole (its viewBox kept) until its smallest text is 16 px.
  legible: function (box) {
    var svg = box.querySelector("svg");
    if (!svg) return;
    var sizes = Array.prototype.map.call(svg.querySelectorAll("text"), function (text) {
      return parseFloat(getComputedStyle(text).fontSize) || 16;
    });
    var scale = Math.max(1, 16 / Math.min.apply(null, sizes.concat([16])));
    ["width", "height"].forEach(function (side) {
      svg.setAttribute(side, parseFloat(svg.getAttribute(side)) * scale);
    });
  },

  // A slide whose content is taller than its box continues on a slide after it, with the same
  // title: its last blocks move there, or a long list's last items. One block taller than a whole
  // slide stays, sticking out, and tests/test_slides.py says so.
  paginate: function (slide) {
    if (slide.querySelector("section")) return;  // a stack: its slides are laid out alone
    slide.style.display = "block";
    annotatedDeck.fitEquations(slide);
    var rest = [];
    while (slide.scrollHeight > slide.clientHeight + 1) {
      var blocks = Array.prototype.filter.call(slide.children, function (child) {
        return !child.matches("h1, h2, aside.notes");
      });
      var last = blocks[blocks.length - 1];
      if (blocks.length > 1) {
        rest.unshift(last);
        last.remove();
      } else if (last && last.matches("ul, ol") && last.children.length > 1) {
        var tail = rest[0] && rest[0].dataset.split ? rest[0] : last.cloneNode(false);
        if (tail !== rest[0]) { tail.dataset.split = "1"; tail.innerHTML = ""; rest.unshift(tail); }
        tail.insertBefore(last.lastElementChild, tail.firstChild);
        if (last.matches("ol")) tail.start = (last.start || 1) + last.children.length;
      } else {
        break;
      }
    }
    slide.style.display = "";
    if (!rest.length) return;
    var next = document.createElement("section");
    next.className = "content-slide continued";
    var title = slide.dataset.title || slide.querySelector("h1, h2").innerHTML;
    next.dataset.title = title;
    next.appendChild(document.createElement("h2")).innerHTML = title + " (continued)";
    rest.forEach(function (block) { next.appendChild(block); });
    slide.after(next);
    annotatedDeck.paginate(next);
  },

  // A display equation wider than its slide is typeset smaller until it fits, but never below
  // the body's 16 px: one that still does not fit sticks out, and tests/test_slides.py says so.
  fitEquations: function (slide) {
    slide.querySelectorAll("div.math mjx-container").forEach(function (math) {
      var room = math.parentElement.clientWidth, wide = math.scrollWidth;
      if (!room || wide <= room) return;
      var size = parseFloat(getComputedStyle(math.parentElement).fontSize);
      math.parentElement.style.fontSize = Math.max(16, Math.floor(size * room / wide)) + "px";
    });
  },
};
