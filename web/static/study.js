// Live study page: polls GET /api/v1/studies/{id} about once a second and updates the run matrix
// in place (status badges, progress bars, step counters) until the study reaches a terminal status.
// Plain JavaScript, no framework. The cancel button sends an admin token the user types in.
(function () {
  "use strict";

  var root = document.getElementById("study");
  if (!root) return;
  var api = root.getAttribute("data-api");
  var TERMINAL = { succeeded: true, failed: true, cancelled: true };
  var POLL_MS = 1000;
  var MAX_BACKOFF_MS = 10000;
  var delay = POLL_MS;
  var timer = null;

  function text(el, value) {
    if (el && el.textContent !== value) el.textContent = value;
  }

  function setBadge(container, status) {
    var badge = container && container.querySelector("[data-status]");
    if (!badge) return;
    badge.className = "badge badge-" + status;
    text(badge, status);
  }

  function setBar(container, fraction, status) {
    var bar = container && container.querySelector(".progress");
    if (!bar) return;
    var pct = Math.max(0, Math.min(100, (fraction || 0) * 100));
    bar.className = bar.className.replace(/\b(queued|running|succeeded|failed|cancelled)\b/g, "").trim() + " " + status;
    bar.setAttribute("aria-valuenow", pct.toFixed(1));
    bar.firstElementChild.style.width = pct.toFixed(1) + "%";
  }

  function formatThroughput(x) {
    if (x === null || x === undefined || !isFinite(x)) return "";
    return x >= 1000 ? Math.round(x).toLocaleString("en-US") : x.toPrecision(3);
  }

  function updateRun(run) {
    var cell = root.querySelector('[data-run-id="' + run.id + '"]');
    if (!cell) return;
    setBadge(cell, run.status);
    setBar(cell, run.progress, run.status);
    var parts = [];
    if (run.current_step !== null && run.current_step !== undefined && run.total_steps) {
      parts.push("step " + run.current_step + "/" + run.total_steps);
    }
    var tput = formatThroughput(run.latest_throughput);
    if (tput) parts.push(tput + " tok/s");
    if (run.attempt > 1) parts.push("attempt " + run.attempt);
    text(cell.querySelector("[data-meta]"), parts.join(" · "));
    if (run.error) cell.title = run.error;
    var reason = cell.querySelector("[data-reason]");
    if (reason) {
      var said = run.error ? (run.failure_kind ? run.failure_kind + ": " : "") + run.error : "";
      text(reason, said.length > 140 ? said.slice(0, 137) + "..." : said);
      reason.hidden = !said;
    }
  }

  function updateStudy(study) {
    var runs = study.runs || [];
    var done = 0;
    var work = 0;
    var running = false;
    runs.forEach(function (r) {
      if (TERMINAL[r.status]) done += 1;
      if (r.status === "running") running = true;
      // Overall bar: finished runs count whole, running ones by their step progress.
      work += TERMINAL[r.status] ? 1 : r.progress || 0;
      updateRun(r);
    });
    // The stored study status is refreshed when runs finish; while one runs, say so.
    var shown = study.status === "queued" && running ? "running" : study.status;
    setBadge(document.getElementById("study-status"), shown);
    setBar(document.getElementById("study-progress"), runs.length ? work / runs.length : 0, shown);
    text(document.getElementById("study-counts"), done + "/" + runs.length + " runs finished");
    root.setAttribute("data-status", study.status);
  }

  function stop(note) {
    if (timer) window.clearTimeout(timer);
    timer = null;
    root.setAttribute("data-terminal", "true");
    text(document.getElementById("live-note"), note);
    var cancel = document.getElementById("cancel-study");
    if (cancel) cancel.hidden = true;
  }

  function showError(message) {
    var box = document.getElementById("study-error");
    if (!box) return;
    box.hidden = !message;
    text(box, message || "");
  }

  function schedule() {
    timer = window.setTimeout(poll, delay);
  }

  function poll() {
    fetch(api, { headers: { Accept: "application/json" }, cache: "no-store" })
      .then(function (response) {
        if (!response.ok) throw new Error("the server answered " + response.status);
        return response.json();
      })
      .then(function (study) {
        delay = POLL_MS;
        updateStudy(study);
        if (TERMINAL[study.status]) {
          stop("finished");
        } else {
          text(document.getElementById("live-note"), "updating live");
          schedule();
        }
      })
      .catch(function (err) {
        // Keep trying with a growing delay: a restarting API server should not freeze the page.
        delay = Math.min(delay * 2, MAX_BACKOFF_MS);
        text(document.getElementById("live-note"), "cannot reach the server (" + err.message + "), retrying");
        schedule();
      });
  }

  function problemText(response) {
    return response.text().then(function (body) {
      try {
        var p = JSON.parse(body);
        return (p.title ? p.title + ": " : "") + (p.detail || body);
      } catch (e) {
        return "HTTP " + response.status + (body ? ": " + body : "");
      }
    });
  }

  var cancel = document.getElementById("cancel-study");
  if (cancel) {
    cancel.addEventListener("click", function () {
      var token = window.prompt("Cancelling needs an admin token. Token:");
      if (!token) return;
      cancel.disabled = true;
      fetch(api + "/cancel", {
        method: "POST",
        headers: { Authorization: "Bearer " + token.trim(), Accept: "application/json" },
      })
        .then(function (response) {
          if (!response.ok) return problemText(response).then(function (msg) { throw new Error(msg); });
          showError("");
          // The next poll shows the cancelled runs whatever the cancel call answers with.
          return response.json().then(function (body) {
            if (body && body.runs) updateStudy(body);
          }, function () {});
        })
        .catch(function (err) {
          showError("Cancel failed — " + err.message);
        })
        .then(function () {
          cancel.disabled = false;
        });
    });
  }

  if (root.getAttribute("data-terminal") !== "true") schedule();
})();
