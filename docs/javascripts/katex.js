// Render the math that pymdownx.arithmatex (generic mode) leaves as \( ... \) and \[ ... \], with the KaTeX
// served from docs/assets/katex (no CDN). Material's document$ fires on every page load, instant navigation too.
document$.subscribe(({ body }) => {
  renderMathInElement(body, {
    delimiters: [
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
    throwOnError: false,
  });
});
