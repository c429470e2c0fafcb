// llmgw portal: the chat page.
//
// The conversation lives in this script's memory only: reloading the page
// starts afresh and nothing of it is sent anywhere but the gateway's
// /v1/chat/completions, like any other client. The key for those requests
// is a short-lived one of the person's, asked of /chat/key (with the
// session's CSRF token) and asked again when it expires or the project
// changes. Answers stream in as they come; Stop aborts the request.
(function () {
  "use strict";

  var root = document.getElementById("chat");
  if (!root) { return; }
  var csrf = root.dataset.csrf;
  var keysRequired = root.dataset.keys === "yes";
  var projectSelect = document.getElementById("chat-project");
  var modelSelect = document.getElementById("chat-model");
  var log = document.getElementById("chat-log");
  var form = document.getElementById("chat-form");
  var text = document.getElementById("chat-text");
  var send = document.getElementById("chat-send");
  var stop = document.getElementById("chat-stop");
  var clear = document.getElementById("chat-clear");

  var history = [];
  var key = null, keyProject = null, controller = null;

  function message(name) { return root.dataset["msg" + name] || ""; }

  function fillModels() {
    var option = projectSelect.selectedOptions[0];
    var models = ((option && option.dataset.models) || "").split(",").filter(Boolean);
    var previous = modelSelect.value;
    modelSelect.textContent = "";
    models.forEach(function (name) {
      var o = document.createElement("option");
      o.value = name; o.textContent = name;
      if (name === previous) { o.selected = true; }
      modelSelect.appendChild(o);
    });
    send.disabled = models.length === 0;
    modelSelect.title = models.length ? "" : message("NoModels");
  }

  function bubble(role, label) {
    var box = document.createElement("div");
    box.className = "message " + role;
    var who = document.createElement("span");
    who.className = "who"; who.textContent = label;
    var body = document.createElement("div");
    body.className = "body";
    box.appendChild(who); box.appendChild(body);
    log.appendChild(box);
    box.scrollIntoView({ block: "end" });
    return { box: box, body: body };
  }

  function note(target, words) {
    var n = document.createElement("span");
    n.className = "note"; n.textContent = words;
    target.box.appendChild(n);
  }

  function show(target, answer) {
    target.body.replaceChildren(window.llmgwMarkdown.render(answer));
  }

  async function chatKey(fresh) {
    if (!keysRequired) { return null; }
    if (key && !fresh && keyProject === projectSelect.value) { return key; }
    var body = new URLSearchParams({ csrf: csrf, project: projectSelect.value });
    var response = await fetch("/chat/key", { method: "POST", body: body, credentials: "same-origin" });
    if (!response.ok) {
      var problem = await response.json().catch(function () { return {}; });
      throw new Error(problem.error || ("HTTP " + response.status));
    }
    var answer = await response.json();
    key = answer.key; keyProject = projectSelect.value;
    return key;
  }

  function call(secret) {
    var headers = { "Content-Type": "application/json" };
    if (secret) { headers.Authorization = "Bearer " + secret; }
    return fetch("/v1/chat/completions", {
      method: "POST", headers: headers, credentials: "omit", signal: controller.signal,
      body: JSON.stringify({ model: modelSelect.value, messages: history, stream: true }),
    });
  }

  async function refusal(response) {
    var body = await response.json().catch(function () { return null; });
    var detail = body && body.error && body.error.message ? body.error.message : ("HTTP " + response.status);
    return message("Error") + " " + detail;
  }

  function busy(on) {
    send.disabled = on || modelSelect.options.length === 0;
    stop.disabled = !on;
    text.disabled = on;
  }

  async function ask() {
    var content = text.value.trim();
    if (!content || controller) { return; }
    history.push({ role: "user", content: content });
    var mine = bubble("user", message("You"));
    mine.body.textContent = content;
    text.value = "";
    var out = bubble("assistant", modelSelect.value);
    out.box.setAttribute("aria-busy", "true");
    controller = new AbortController();
    busy(true);
    var answer = "";
    try {
      var response = await call(await chatKey(false));
      if (response.status === 401 && keysRequired) { response = await call(await chatKey(true)); }
      if (!response.ok) {
        out.box.classList.add("error");
        out.body.textContent = await refusal(response);
        history.pop();
        return;
      }
      var reader = response.body.getReader(), decoder = new TextDecoder(), pending = "";
      for (;;) {
        var chunk = await reader.read();
        if (chunk.done) { break; }
        pending += decoder.decode(chunk.value, { stream: true });
        var end;
        while ((end = pending.indexOf("\n")) >= 0) {
          var line = pending.slice(0, end).replace(/\r$/, "");
          pending = pending.slice(end + 1);
          if (line.indexOf("data:") !== 0) { continue; }
          var data = line.slice(5).trim();
          if (!data || data === "[DONE]") { continue; }
          var event;
          try { event = JSON.parse(data); } catch (e) { continue; }
          if (event.error) {
            out.box.classList.add("error");
            note(out, message("Error") + " " + (event.error.message || ""));
            continue;
          }
          var choice = event.choices && event.choices[0];
          if (choice && choice.delta && typeof choice.delta.content === "string") {
            answer += choice.delta.content;
            show(out, answer);
          }
          if (choice && choice.finish_reason === "content_filter") { note(out, message("Filtered")); }
        }
      }
      history.push({ role: "assistant", content: answer });
    } catch (e) {
      if (e.name === "AbortError") {
        note(out, message("Stopped"));
        if (answer) { history.push({ role: "assistant", content: answer }); } else { history.pop(); }
      } else {
        out.box.classList.add("error");
        note(out, message("Error") + " " + e.message);
        history.pop();
      }
    } finally {
      out.box.removeAttribute("aria-busy");
      out.box.setAttribute("data-done", "true");
      controller = null;
      busy(false);
      text.focus();
    }
  }

  projectSelect.addEventListener("change", function () { key = null; fillModels(); });
  form.addEventListener("submit", function (event) { event.preventDefault(); ask(); });
  text.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); ask(); }
  });
  stop.addEventListener("click", function () { if (controller) { controller.abort(); } });
  clear.addEventListener("click", function () {
    if (controller) { controller.abort(); }
    history = []; log.textContent = ""; text.focus();
  });

  fillModels();
})();
