// llmgw portal: a small Markdown renderer for the chat page's answers.
//
// It builds DOM nodes and puts every piece of text in with textContent, so
// nothing a model writes is ever parsed as HTML: "<script>" in an answer is
// shown as those characters. What it understands: fenced code blocks (an
// unclosed fence, as while an answer streams, is code up to the end),
// headings, bullet and numbered lists, quotes, paragraphs, and inline code,
// **bold**, *italics* and [links](https://…). A link is made only for
// http, https and mailto addresses; anything else stays text.
//
//   window.llmgwMarkdown.render(text) -> DocumentFragment
(function () {
  "use strict";

  var SAFE_URL = /^(https?:\/\/|mailto:)/i;
  // The inline forms, tried at each position; the earliest match wins.
  var INLINE = [
    { kind: "code", re: /`([^`\n]+)`/ },
    { kind: "link", re: /\[([^\]\n]+)\]\(([^)\s]+)\)/ },
    { kind: "strong", re: /\*\*([^*\n]+)\*\*|__([^_\n]+)__/ },
    { kind: "em", re: /\*([^*\s][^*\n]*)\*|_([^_\s][^_\n]*)_/ },
  ];

  function inline(parent, text) {
    while (text) {
      var best = null;
      for (var i = 0; i < INLINE.length; i++) {
        var m = INLINE[i].re.exec(text);
        if (m && (best === null || m.index < best.m.index)) { best = { kind: INLINE[i].kind, m: m }; }
      }
      if (best === null) { parent.appendChild(document.createTextNode(text)); return; }
      if (best.m.index > 0) { parent.appendChild(document.createTextNode(text.slice(0, best.m.index))); }
      var m2 = best.m, node;
      if (best.kind === "code") {
        node = document.createElement("code");
        node.textContent = m2[1];
      } else if (best.kind === "link") {
        if (SAFE_URL.test(m2[2])) {
          node = document.createElement("a");
          node.href = m2[2];
          node.rel = "noopener noreferrer";
          node.target = "_blank";
          inline(node, m2[1]);
        } else {
          node = document.createTextNode(m2[0]);
        }
      } else {
        node = document.createElement(best.kind);
        inline(node, m2[1] || m2[2] || "");
      }
      parent.appendChild(node);
      text = text.slice(m2.index + m2[0].length);
    }
  }

  function linesInto(parent, lines) {
    lines.forEach(function (line, i) {
      if (i > 0) { parent.appendChild(document.createElement("br")); }
      inline(parent, line);
    });
  }

  function render(source) {
    var out = document.createDocumentFragment();
    var lines = String(source || "").replace(/\r\n?/g, "\n").split("\n");
    var para = [], list = null, quote = [];

    function flushPara() {
      if (para.length) { var p = document.createElement("p"); linesInto(p, para); out.appendChild(p); para = []; }
    }
    function flushList() { if (list) { out.appendChild(list.node); list = null; } }
    function flushQuote() {
      if (quote.length) {
        var q = document.createElement("blockquote"), p = document.createElement("p");
        linesInto(p, quote); q.appendChild(p); out.appendChild(q); quote = [];
      }
    }
    function flushAll() { flushPara(); flushList(); flushQuote(); }

    for (var i = 0; i < lines.length; i++) {
      var line = lines[i], m;
      if ((m = /^\s*(```+|~~~+)\s*([\w+.-]*)\s*$/.exec(line))) {
        flushAll();
        var fence = m[1], code = [], j = i + 1;
        while (j < lines.length && lines[j].trim().indexOf(fence) !== 0) { code.push(lines[j]); j++; }
        var pre = document.createElement("pre"), c = document.createElement("code");
        if (m[2]) { c.className = "language-" + m[2]; }
        c.textContent = code.join("\n");
        pre.appendChild(c);
        out.appendChild(pre);
        i = j;  // past the closing fence (or the end)
        continue;
      }
      if (!line.trim()) { flushAll(); continue; }
      if ((m = /^(#{1,6})\s+(.*)$/.exec(line))) {
        flushAll();
        var h = document.createElement("h" + Math.min(6, m[1].length + 2));
        inline(h, m[2]);
        out.appendChild(h);
        continue;
      }
      if ((m = /^\s*(?:([-*+])|(\d+)[.)])\s+(.*)$/.exec(line))) {
        flushPara(); flushQuote();
        var tag = m[1] ? "ul" : "ol";
        if (!list || list.tag !== tag) { flushList(); list = { tag: tag, node: document.createElement(tag) }; }
        var li = document.createElement("li");
        inline(li, m[3]);
        list.node.appendChild(li);
        continue;
      }
      if ((m = /^>\s?(.*)$/.exec(line))) { flushPara(); flushList(); quote.push(m[1]); continue; }
      flushList(); flushQuote();
      para.push(line);
    }
    flushAll();
    return out;
  }

  window.llmgwMarkdown = { render: render };
})();
