// Runs before the theme's deferred scripts.
// Font Awesome, which draws the theme's icons, re-scans the page after every change to it by
// default. A chart adds thousands of SVG elements, and those re-scans froze the longest chapter
// for half a minute when opened from disk. Every icon is in the page when it loads, so the one
// scan Font Awesome makes then is enough.
window.FontAwesomeConfig = Object.assign(window.FontAwesomeConfig || {}, {observeMutations: false});
