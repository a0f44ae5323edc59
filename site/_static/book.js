// Runs before the theme's deferred scripts.
// Font Awesome, which draws the theme's icons, re-scans the page after every change to it by
// default. A chart adds thousands of SVG elements, and those re-scans froze the longest chapter
// for half a minute when opened from disk. Every icon is in the page when it loads, so the one
// scan Font Awesome makes then is enough.
window.FontAwesomeConfig = Object.assign(window.FontAwesomeConfig || {}, {observeMutations: false});

// A chart, drawing or table wider than the column scrolls inside its box (book.css), and a box
// that scrolls gets a line above it saying so: browsers on phones and macOS show no scrollbar
// until the reader scrolls, so nothing else tells a reader there is more to the right.
(function () {
  var WIDE = ".annotated-chart, figure.annotated-drawing, div.cell_output .output.text_html, " +
    ".pst-scrollable-table-container, .try-scroll";
  var CUE = "annotated-scroll-cue";

  function mark(box) {
    var cue = box.previousElementSibling;
    var has = cue && cue.classList.contains(CUE);
    var wide = box.clientWidth > 0 && box.scrollWidth > box.clientWidth + 1;
    // A box inside another box that scrolls is scrolled with it: the outer one carries the cue.
    var outer = wide && box.parentElement ? box.parentElement.closest(WIDE) : null;
    if (outer && outer.scrollWidth > outer.clientWidth + 1) wide = false;
    if (wide && !has) {
      cue = document.createElement("p");
      cue.className = CUE;
      cue.textContent = "Wider than the screen: scroll sideways to see the rest.";
      box.parentNode.insertBefore(cue, box);
    } else if (!wide && has) {
      cue.remove();
    }
  }

  function markAll() {
    document.querySelectorAll(WIDE).forEach(mark);
  }

  var pending = null;
  function later() {
    clearTimeout(pending);
    pending = setTimeout(markAll, 200);
  }

  document.addEventListener("annotated-chart-drawn", function (event) { mark(event.target); });
  window.addEventListener("resize", later);
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", markAll);
  } else {
    markAll();
  }
  window.addEventListener("load", markAll);
})();
