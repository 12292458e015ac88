// xmode ui: the one script of the pages (docs/ui.md). It streams the
// output of running steps: each <pre data-live="URL"> listens to its
// step's server-sent events and appends what they carry as text nodes in
// spans whose class the server chose, following the log's end as long as
// the reader is there; the step's counters (duration, bytes, the badge,
// the timeline's bars) follow its state events. It never parses HTML, and
// never touches a URL a sandbox wrote (data-live is built by the server
// from IDs); it sets text, classes and numbers only.
'use strict';

// atEnd: the log box shows its last line (within a few pixels).
function atEnd(pre) {
  return pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
}

function setText(id, text) {
  var el = document.getElementById(id);
  if (el && typeof text === 'string') {
    el.textContent = text;
  }
}

// The SVG timeline's bars, as the server laid them out now.
function moveTimeline(tl) {
  var svg = document.querySelector('svg.timeline');
  if (!svg || !tl) {
    return;
  }
  var ticks = svg.querySelectorAll('text.axis');
  for (var i = 0; i < ticks.length && i < tl.ticks.length; i++) {
    ticks[i].textContent = tl.ticks[i];
  }
  for (var j = 0; j < tl.rows.length; j++) {
    var r = tl.rows[j];
    var a = document.getElementById('tl-' + r.seq);
    if (!a) {
      continue; // a step that started after the page was drawn
    }
    var rect = a.querySelector('rect');
    var info = a.querySelector('text.info');
    if (rect) {
      rect.setAttribute('x', String(r.x));
      rect.setAttribute('width', String(r.w));
      rect.setAttribute('class', r['class']);
    }
    if (info) {
      info.setAttribute('x', String(r.x + r.w + 6));
      info.textContent = r.info;
    }
  }
}

// counters shows a state or end event's numbers.
function counters(pre, d) {
  var stream = pre.dataset.stream;
  setText('dur-' + d.step, d.duration);
  if (stream) {
    setText('bytes-' + d.step + '-' + stream, String(d.bytes));
  }
  var state = document.getElementById(pre.dataset.state || '');
  if (state && d.exit) {
    state.textContent = d.exit;
    state.className = 'badge ' + d['class'];
  }
  moveTimeline(d.timeline);
}

function follow(pre) {
  var es = new EventSource(pre.dataset.live);
  pre.scrollTop = pre.scrollHeight; // the page opens at the log's end
  es.addEventListener('out', function (e) {
    var segs = JSON.parse(e.data);
    var stick = atEnd(pre);
    for (var i = 0; i < segs.length; i++) {
      var s = segs[i];
      var span = document.createElement('span');
      if (s.e) {
        span.className = 'esc';
      } else if (s.c) {
        span.className = s.c;
      }
      span.textContent = s.t;
      pre.appendChild(span);
    }
    if (stick) {
      pre.scrollTop = pre.scrollHeight;
    }
  });
  es.addEventListener('state', function (e) {
    counters(pre, JSON.parse(e.data));
  });
  es.addEventListener('end', function (e) {
    es.close();
    var d = JSON.parse(e.data);
    pre.removeAttribute('data-live');
    pre.classList.add('ended');
    counters(pre, d);
    if (d.error) {
      var note = document.createElement('p');
      note.className = 'note';
      note.textContent = d.error;
      pre.parentNode.insertBefore(note, pre.nextSibling);
    }
  });
}

document.addEventListener('DOMContentLoaded', function () {
  var logs = document.querySelectorAll('pre.log');
  for (var i = 0; i < logs.length; i++) {
    if (logs[i].dataset.live) {
      follow(logs[i]);
    } else if (logs[i].dataset.tail) {
      logs[i].scrollTop = logs[i].scrollHeight; // a log's end is what was shown
    }
  }
});
