// xmode ui: the one script of the pages (docs/ui.md). On a change
// request's page, a click on a line's number opens a comment form under
// the line; what it adds goes into the review form as fields, shown in its
// list, and is sent with the review (without this script, the review's
// comments field takes them typed). It streams the output of running steps: each <pre data-live="URL"> listens to its
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

// openComment puts a comment form under the line whose number button was
// clicked: a copy of the page's <template>, its fields set as text.
function openComment(btn) {
  var tpl = document.getElementById('comment-form');
  var review = document.getElementById('review-form');
  var row = btn.closest('tr');
  if (!tpl || !review || !row) {
    return;
  }
  var next = row.nextElementSibling;
  if (next && next.classList.contains('cform')) {
    next.querySelector('textarea').focus();
    return;
  }
  var path = btn.dataset.path, side = btn.dataset.side, line = btn.dataset.line;
  var form = tpl.content.firstElementChild.cloneNode(true);
  form.querySelector('td').colSpan = row.children.length;
  form.querySelector('.where').textContent = path + ':' + (side === 'old' ? '-' : '') + line;
  row.parentNode.insertBefore(form, row.nextSibling);
  var text = form.querySelector('textarea');
  form.querySelector('button.cancel').addEventListener('click', function () {
    form.remove();
  });
  form.querySelector('form').addEventListener('submit', function (e) {
    e.preventDefault();
    if (!text.value.trim()) {
      return;
    }
    var fields = {comment_path: path, comment_side: side, comment_line: line, comment_text: text.value};
    var li = document.createElement('li');
    li.className = 'pending';
    for (var k in fields) {
      var input = document.createElement('input');
      input.type = 'hidden';
      input.name = k;
      input.value = fields[k];
      li.appendChild(input);
    }
    var where = document.createElement('code');
    where.textContent = path + ':' + (side === 'old' ? '-' : '') + line;
    li.appendChild(where);
    li.appendChild(document.createTextNode(' ' + text.value));
    document.getElementById('pending').appendChild(li);
    form.remove();
  });
  text.focus();
}

document.addEventListener('DOMContentLoaded', function () {
  var lines = document.querySelectorAll('button.cl');
  for (var j = 0; j < lines.length; j++) {
    lines[j].addEventListener('click', function (e) {
      openComment(e.currentTarget);
    });
  }
  var logs = document.querySelectorAll('pre.log');
  for (var i = 0; i < logs.length; i++) {
    if (logs[i].dataset.live) {
      follow(logs[i]);
    } else if (logs[i].dataset.tail) {
      logs[i].scrollTop = logs[i].scrollHeight; // a log's end is what was shown
    }
  }
});
