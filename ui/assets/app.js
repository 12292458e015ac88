// xmode ui: the one script of the pages (docs/ui.md). It streams the
// output of running steps: each <pre data-live="URL"> listens to its
// step's server-sent events and appends what they carry as text nodes in
// spans whose class the server chose. It never parses HTML, and never
// touches a URL a sandbox wrote (data-live is built by the server from
// IDs).
'use strict';

function follow(pre) {
  var es = new EventSource(pre.dataset.live);
  var state = document.getElementById(pre.dataset.state || '');
  es.addEventListener('out', function (e) {
    var segs = JSON.parse(e.data);
    var stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
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
  es.addEventListener('end', function (e) {
    es.close();
    var d = JSON.parse(e.data);
    pre.removeAttribute('data-live');
    pre.classList.add('ended');
    if (state && d.exit) {
      state.textContent = d.exit;
      state.className = 'badge ' + (/^exit 0$/.test(d.exit) ? 'pass' : 'fail');
    }
    if (d.error) {
      var note = document.createElement('p');
      note.className = 'note';
      note.textContent = d.error;
      pre.parentNode.insertBefore(note, pre.nextSibling);
    }
  });
}

document.addEventListener('DOMContentLoaded', function () {
  var live = document.querySelectorAll('pre[data-live]');
  for (var i = 0; i < live.length; i++) {
    follow(live[i]);
  }
});
