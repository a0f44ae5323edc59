"""The site's pages as a reader sees them: nothing cut, nothing too small, legible in light and dark.

tests/test_site.py checks that each page draws what its notebook holds. This module measures how
it lies on the screen, on every page, in Chromium, at a desktop width (1280 px) and at a phone's
(390 px), with the theme's light mode and its dark mode:

- every chart, drawing and table lies within the text column at 1280 px; at a phone's width it
  lies within it or sits in a box that scrolls sideways and shows a visible cue saying so;
- at 1280 px every code block's content fits its box (nothing hidden past its right edge);
- no text of a drawing is smaller on screen than the page's figure captions, and no two texts of
  a drawing overlap;
- every text of a chart or a drawing (and a drawing's caption, and the cue above a box that
  scrolls) has a contrast of at least 4.5:1 (WCAG AA) against what is painted behind it, in both
  modes.

With ANNOTATED_SCREENSHOTS=1 (`make screenshots`), pictures of every page in both modes go to
`_build/screenshots/` (`<page>.png` is light, `dark-<page>.png` dark, `phone-...` at the phone's
width).
"""

from __future__ import annotations

import pytest
from test_site import (
    DESKTOP,
    EXERCISE_PAGES,
    PAGES,
    PHONE,
    check_page,
    folded_until_asked,
    hover_tooltips,
    read_page,
    screenshot,
    served_from,
)

MODES = ("light", "dark")
MIN_CONTRAST = 4.5  # WCAG 2 level AA for text of normal size

# The column that a page's content is laid out in: the article's box less its padding.
_COLUMN = """() => {
  const article = document.querySelector('article.bd-article');
  const box = article.getBoundingClientRect(), style = getComputedStyle(article);
  return {left: box.left + parseFloat(style.paddingLeft),
          right: box.right - parseFloat(style.paddingRight)};
}"""

# Every chart, drawing and table: where it lies, and where its scroll box (if any) lies.
_WIDE_THINGS = """(column) => {
  const found = [];
  const things = [
    ...Array.from(document.querySelectorAll('.annotated-chart')).map(box =>
      ['chart', box, box.querySelector('svg, canvas')]),
    ...Array.from(document.querySelectorAll('figure.annotated-drawing')).map(figure =>
      ['drawing', figure, figure.querySelector('svg')]),
    ...Array.from(document.querySelectorAll('article.bd-article table')).map(table =>
      ['table', table, table]),
  ];
  for (const [kind, holder, element] of things) {
    if (!element || !element.getClientRects().length) continue;  // folded away
    const box = element.getBoundingClientRect();
    const named = holder.querySelector(kind === 'chart' ? '.role-title-text' : 'title');
    const name = kind === 'table' ? (holder.textContent || '').trim().slice(0, 60)
      : (named ? named.textContent : holder.id);
    const fits = box.left >= column.left - 1 && box.right <= column.right + 1;
    let scroller = null;
    for (let node = element.parentElement; node && node.tagName !== 'ARTICLE';
         node = node.parentElement) {
      const overflow = getComputedStyle(node).overflowX;
      if ((overflow === 'auto' || overflow === 'scroll') && node.scrollWidth > node.clientWidth) {
        scroller = node;
        break;
      }
    }
    let cue = null;
    if (scroller) {
      const r = scroller.getBoundingClientRect();
      const mark = scroller.previousElementSibling;
      const shown = mark && mark.classList.contains('annotated-scroll-cue')
        && mark.getClientRects().length > 0 && getComputedStyle(mark).visibility === 'visible';
      cue = {inside: r.left >= column.left - 1 && r.right <= column.right + 1,
             shown: !!shown, text: shown ? mark.textContent.trim() : ''};
    }
    found.push({kind: kind, name: name.trim(), left: Math.round(box.left),
                right: Math.round(box.right), fits: fits, scroller: cue});
  }
  return found;
}"""

# Code blocks (the cells' source and their text outputs) whose content is wider than their box.
_CUT_CODE = """() => Array.from(document.querySelectorAll('article.bd-article pre'))
  .filter(pre => pre.getClientRects().length && pre.scrollWidth > pre.clientWidth + 1)
  .map(pre => {
    const lines = pre.textContent.split('\\n');
    const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), '');
    return {over: pre.scrollWidth - pre.clientWidth, line: longest.slice(0, 120)};
  })"""

# The text of every drawing: its size on screen and its box, against the captions' size.
_DRAWING_TEXT = """() => {
  const caption = document.querySelector('figure.annotated-drawing figcaption');
  const least = caption ? parseFloat(getComputedStyle(caption).fontSize) : 0;
  return Array.from(document.querySelectorAll('figure.annotated-drawing svg')).map(svg => {
    const title = (svg.querySelector('title') || {}).textContent || '';
    const texts = Array.from(svg.querySelectorAll('text'))
      .filter(t => t.textContent.trim() && t.getClientRects().length);
    const scale = svg.getScreenCTM().a;
    const small = texts
      .map(t => ({text: t.textContent.trim(), px: parseFloat(getComputedStyle(t).fontSize) * scale}))
      .filter(t => t.px < least - 0.05)
      .map(t => `${t.text} (${t.px.toFixed(1)} px)`);
    const boxes = texts.map(t => [t.textContent.trim(), t.getBoundingClientRect()]);
    const overlaps = [];
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        const [a, p] = boxes[i], [b, q] = boxes[j];
        const x = Math.min(p.right, q.right) - Math.max(p.left, q.left);
        const y = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
        if (x > 1 && y > 1) overlaps.push(`"${a}" and "${b}"`);
      }
    }
    return {title: title, caption_px: least, small: small, overlaps: overlaps};
  });
}"""

# Each text of each chart and drawing against what is painted behind its middle: the elements
# under that point, top down, are blended until one is opaque (the page's background at worst).
_CONTRAST = """(least) => {
  const parse = (color) => {
    const m = (color || '').match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const v = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
  };
  const over = (top, under) => [0, 1, 2].map(i => top[i] * top[3] + under[i] * (1 - top[3]));
  const luminance = (rgb) => {
    const c = rgb.map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
  };
  const paint = (element) => {
    const style = getComputedStyle(element);
    if (style.visibility !== 'visible' || style.display === 'none') return null;
    let color = null;
    if (element instanceof SVGElement && element.tagName !== 'svg') {
      if (['text', 'tspan', 'g', 'title', 'desc', 'defs', 'marker'].includes(element.tagName)) return null;
      color = parse(style.fill);
      if (color) color[3] *= parseFloat(style.fillOpacity);
    } else {
      color = parse(style.backgroundColor);
    }
    if (!color || color[3] === 0) return null;
    color[3] *= parseFloat(style.opacity);
    return color;
  };
  const behind = (x, y, text) => {
    const layers = [];
    for (const element of document.elementsFromPoint(x, y)) {
      if (element === text || text.contains(element)) continue;
      const color = paint(element);
      if (!color) continue;
      layers.push(color);
      if (color[3] >= 0.999) break;
    }
    let rgb = [255, 255, 255];  // a page with no background of its own is shown on white
    for (const color of layers.reverse()) rgb = over(color, rgb);
    return rgb;
  };
  const texts = [
    ...document.querySelectorAll('.annotated-chart svg text, figure.annotated-drawing svg text'),
    ...document.querySelectorAll('figure.annotated-drawing figcaption, p.annotated-scroll-cue'),
  ].filter(t => t.textContent.trim() && t.getClientRects().length);
  const worst = [];
  for (const text of texts) {
    text.scrollIntoView({block: 'center', inline: 'center'});
    const box = text.getBoundingClientRect();
    if (box.width < 1 || box.height < 1) continue;
    const style = getComputedStyle(text);
    const svg = text instanceof SVGElement;
    const ink = parse(svg ? style.fill : style.color);
    if (!ink) continue;
    // Opacity multiplies down the tree: a label Vega hid (opacity 0) or a faded part counts as such.
    for (let node = text; node && node.nodeType === 1; node = node.parentNode) {
      ink[3] *= parseFloat(getComputedStyle(node).opacity);
    }
    if (svg) ink[3] *= parseFloat(style.fillOpacity);
    if (ink[3] < 0.01) continue;  // not drawn at all
    const ground = behind(box.left + box.width / 2, box.top + box.height / 2, text);
    const shown = over(ink, ground);
    const [a, b] = [luminance(shown), luminance(ground)].sort((p, q) => q - p);
    const ratio = (a + 0.05) / (b + 0.05);
    if (ratio < least) {
      const where = text.closest('.annotated-chart, figure.annotated-drawing');
      const named = where && where.querySelector('.role-title-text, title');
      worst.push({text: text.textContent.trim().slice(0, 40), ratio: Math.round(ratio * 100) / 100,
                  ink: svg ? style.fill : style.color, ground: `rgb(${ground.map(Math.round).join(', ')})`,
                  where: named ? named.textContent.trim().slice(0, 60) : where ? where.id : 'cue'});
    }
  }
  return {checked: texts.length, failing: worst};
}"""


def open_page(browser, server, name: str, viewport: dict, mode: str, **options):  # noqa: F811
    """A page read by a reader whose system is set to `mode` (the site follows it, conf.py), with
    the checks of tests/test_site.py passed."""
    context = browser.new_context(viewport=viewport, color_scheme=mode, **options)
    page, report = read_page(context, f"{server}{name}.html", served_from(server))
    assert page.evaluate("() => document.documentElement.dataset.theme") == mode
    check_page(page, report, name)
    return context, page


def misplaced(page, phone: bool) -> list[str]:
    """What lies outside the column (at a phone's width: outside it and not in a cued scroll box)."""
    column = page.evaluate(_COLUMN)
    found = []
    for thing in page.evaluate(_WIDE_THINGS, column):
        if thing["fits"]:
            continue
        scroller = thing["scroller"]
        if phone and scroller and scroller["inside"] and scroller["shown"]:
            continue
        where = f"{thing['left']}..{thing['right']} px in a column of {column['left']:.0f}.."
        where += f"{column['right']:.0f} px"
        if scroller:
            where += ", scrolling" + ("" if scroller["shown"] else " with no visible cue")
        found.append(f"{thing['kind']} {thing['name']!r}: {where}")
    return found


def illegible_drawings(page) -> list[str]:
    found = []
    for drawing in page.evaluate(_DRAWING_TEXT):
        if drawing["small"]:
            found.append(
                f"{drawing['title']!r}: text smaller than the captions' "
                f"{drawing['caption_px']:.1f} px: {drawing['small'][:6]}"
            )
        if drawing["overlaps"]:
            found.append(f"{drawing['title']!r}: overlapping texts: {drawing['overlaps'][:6]}")
    return found


def low_contrast(page) -> list[str]:
    result = page.evaluate(_CONTRAST, MIN_CONTRAST)
    return [
        f"{t['where']}: {t['text']!r} at {t['ratio']}:1 ({t['ink']} on {t['ground']})"
        for t in result["failing"]
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", PAGES)
def test_page_at_desktop_width(site, server, browser, name, mode):  # noqa: F811
    """Served over http with every other host refused: test_site.py's checks (charts drawn, math
    typeset, no console error, no foreign request; in light mode each chart's tooltip too), then
    what lies outside the column, cut code, drawing text and contrast; last, in dark mode, that
    the exercises' answers are folded until asked for (clicking them changes the page)."""
    context, page = open_page(browser, server, name, DESKTOP, mode)
    try:
        if mode == "light":
            hover_tooltips(page, name)
        prefix = "" if mode == "light" else f"{mode}-"
        screenshot(page, f"{prefix}{name}.png", full_page=True)
        problems = misplaced(page, phone=False)
        problems += [f"code cut by {c['over']} px: {c['line']!r}" for c in page.evaluate(_CUT_CODE)]
        problems += illegible_drawings(page)
        problems += low_contrast(page)
        assert not problems, f"{name} ({mode}, 1280 px):\n" + "\n".join(problems)
        if mode == "dark" and name in EXERCISE_PAGES:
            folded_until_asked(page, name)
    finally:
        context.close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", PAGES)
def test_page_at_phone_width(site, server, browser, name, mode):  # noqa: F811
    context, page = open_page(
        browser, server, name, PHONE, mode, device_scale_factor=2, is_mobile=True
    )
    try:
        width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1] + 1, f"{name}: {width[0]}px of page in a {width[1]}px window"
        problems = misplaced(page, phone=True) + illegible_drawings(page) + low_contrast(page)
        cue = page.locator(".annotated-scroll-cue")
        if cue.count():  # show how a wide picture sits in the narrow column
            cue.first.scroll_into_view_if_needed()
        prefix = "phone-" if mode == "light" else f"phone-{mode}-"
        screenshot(page, f"{prefix}{name}.png")
        assert not problems, f"{name} ({mode}, phone):\n" + "\n".join(problems)
    finally:
        context.close()
