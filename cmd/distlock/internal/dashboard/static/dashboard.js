// The dashboard's live updates: the server pushes the whole view over
// server-sent events when it changes; this renders it into the tables the
// server rendered first, and ticks the durations every second. Text goes
// in with textContent only, never as HTML.
'use strict';
(function () {
  const body = document.body;
  const eventsURL = body.dataset.events;
  if (!eventsURL || !window.EventSource) {
    return; // the login form, or an old browser: the static page stays
  }
  const admin = body.dataset.admin === '1';
  const canForce = body.dataset.force === '1';
  let prefix = body.dataset.prefix || '';
  let view = null;
  let skew = Date.parse(body.dataset.now) - Date.now(); // server clock minus ours
  if (Number.isNaN(skew)) {
    skew = 0;
  }
  let source = null;
  const state = { opens: 0, messages: 0 }; // for tests and the curious: window.distlockDashboard
  window.distlockDashboard = state;

  const $ = (id) => document.getElementById(id);
  const now = () => Date.now() + skew;

  // human is a duration as people read it, as the server's human() writes it.
  function human(ms) {
    ms = Math.abs(ms);
    const s = Math.floor(ms / 1000);
    const pad = (n) => String(n).padStart(2, '0');
    if (ms < 1000) return '<1s';
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + pad(s % 60) + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h' + pad(Math.floor((s % 3600) / 60)) + 'm';
    return Math.floor(s / 86400) + 'd' + pad(Math.floor((s % 86400) / 3600)) + 'h';
  }

  // waitTime is a wait as the server's waitTime() writes it.
  function waitTime(ms) {
    if (ms < 1000) return Math.round(ms) + 'ms';
    if (ms < 10000) return (ms / 1000).toFixed(1) + 's';
    return human(ms);
  }

  // keyCell is a key's cell, as the server says to show it (invisible and
  // unnormalised characters escaped), with a line break opportunity after
  // each slash.
  function keyCell(key) {
    const c = td('Key', '', 'key');
    key.split('/').forEach((part, i) => {
      if (i > 0) c.append('/', document.createElement('wbr'));
      c.append(part);
    });
    return c;
  }

  function heldFor(since) {
    const t = Date.parse(since);
    return Number.isNaN(t) ? '?' : human(now() - t);
  }

  function leaseLeft(expires) {
    const left = Date.parse(expires) - now();
    return left > 0 ? 'in ' + human(left) : 'expiring';
  }

  function nearMaxHold(l) {
    return l.maxHoldMs > 0 && now() - Date.parse(l.since) >= 0.8 * l.maxHoldMs;
  }

  function lockClass(l) {
    if (l.failing) return 'fail';
    if (l.leaseMs > 0 && Date.parse(l.expires) - now() < 0.2 * l.leaseMs) return 'warn';
    if (nearMaxHold(l)) return 'warn';
    return '';
  }

  function td(label, text, cls) {
    const c = document.createElement('td');
    if (label) c.dataset.label = label;
    if (cls) c.className = cls;
    c.textContent = text;
    return c;
  }

  function badge(text, cls) {
    const b = document.createElement('span');
    b.className = 'badge' + (cls ? ' ' + cls : '');
    b.textContent = text;
    return b;
  }

  function lockRow(l) {
    const tr = document.createElement('tr');
    tr.dataset.key = l.tenant + '/' + l.key;
    const cls = lockClass(l);
    if (cls) tr.className = cls;
    const key = keyCell(l.shown);
    if (l.failing) key.append(' ', badge('renewals failing', 'fail'));
    if (l.maxHoldMs > 0) { // shown by tick once near
      const b = badge('near max hold ' + human(l.maxHoldMs), 'warn near');
      b.hidden = !nearMaxHold(l);
      key.append(' ', b);
    }
    if (l.session) key.append(' ', badge('session'));
    if (l.kind) key.append(' ', badge(l.kind, 'kind'));
    tr.append(key);
    if (admin) tr.append(td('Tenant', l.tenant));
    tr.append(td('Owner', l.owner), td('Business id', l.businessId));
    const since = td('Held for', heldFor(l.since), 'since');
    since.dataset.since = l.since;
    const left = td('Lease left', leaseLeft(l.expires), 'left');
    left.dataset.expires = l.expires;
    left.dataset.leaseMs = String(l.leaseMs);
    tr.append(since, left, td('Fence', l.fence, 'num'), td('Waiters', String(l.waiters), l.waiters ? 'num hot' : 'num'));
    if (canForce) {
      const act = td('', '', 'act');
      if (l.forcible) {
        const a = document.createElement('a');
        a.className = 'force';
        a.href = '/dashboard/force-release?' + new URLSearchParams({ tenant: l.tenant, key: l.key, fence: l.fence });
        a.textContent = 'Force release…';
        act.append(a);
      }
      tr.append(act);
    }
    tr._lock = l;
    return tr;
  }

  function contendedRow(c) {
    const tr = document.createElement('tr');
    tr.dataset.key = c.tenant + '/' + c.key;
    tr.append(keyCell(c.shown));
    if (admin) tr.append(td('Tenant', c.tenant));
    tr.append(
      td('Waiting now', String(c.waiters), c.waiters ? 'num hot' : 'num'),
      td('Waited', String(c.waited), 'num'),
      td('Gave up', String(c.gaveUp), 'num'),
      td('Total wait', c.waited ? waitTime(c.totalMs) : '', 'num'),
      td('Max wait', c.waited ? waitTime(c.maxMs) : '', 'num'),
    );
    return tr;
  }

  function lossRow(l) {
    const tr = document.createElement('tr');
    tr.dataset.key = l.tenant + '/' + l.key;
    tr.dataset.kind = l.kind;
    const at = td('When', human(now() - Date.parse(l.at)) + ' ago', 'at');
    at.dataset.at = l.at;
    const what = td('What', '');
    what.append(badge(l.kind, 'kind'));
    tr.append(at, what, keyCell(l.shown));
    if (admin) tr.append(td('Tenant', l.tenant));
    const reason = td('Reason', l.reason);
    if (l.by) {
      const by = document.createElement('span');
      by.className = 'by';
      by.textContent = '(by ' + l.by + ')';
      reason.append(' ', by);
    }
    tr.append(td('Owner', l.owner), td('Business id', l.businessId), td('Fence', l.fence, 'num'), reason);
    return tr;
  }

  function fill(id, rows) {
    $(id + '-body').replaceChildren(...rows);
    $(id + '-empty').hidden = rows.length > 0;
  }

  function render() {
    fill('locks', view.locks.map(lockRow));
    $('locks-count').textContent = String(view.locks.length);
    const more = $('locks-more');
    more.hidden = !view.more;
    more.firstElementChild.textContent = String(view.more);
    fill('contended', view.contended.map(contendedRow));
    fill('losses', view.losses.map(lossRow));
    setStatus();
  }

  // tick moves the durations on between views.
  function tick() {
    for (const c of document.querySelectorAll('#locks-body td.since')) c.textContent = heldFor(c.dataset.since);
    for (const c of document.querySelectorAll('#locks-body td.left')) c.textContent = leaseLeft(c.dataset.expires);
    for (const tr of document.querySelectorAll('#locks-body tr')) {
      if (!tr._lock) continue;
      tr.className = lockClass(tr._lock);
      const near = tr.querySelector('.badge.near');
      if (near) near.hidden = !nearMaxHold(tr._lock);
    }
    for (const c of document.querySelectorAll('#losses-body td.at')) c.textContent = human(now() - Date.parse(c.dataset.at)) + ' ago';
  }

  let connected = false;
  function setStatus() {
    const s = $('status');
    const span = document.createElement('span');
    if (!connected) {
      span.className = 'bad';
      span.textContent = 'Reconnecting… (the table shows the last view)';
    } else if (view && view.error) {
      span.className = 'bad';
      span.textContent = view.error;
    } else if (view && view.stale) {
      span.className = 'warn';
      span.textContent = 'Live, but the store was last read a while ago';
    } else {
      span.className = 'ok';
      span.id = 'live';
      span.textContent = '● Live';
    }
    s.replaceChildren(span);
  }

  function connect() {
    if (source) source.close();
    const url = eventsURL + (prefix ? '?prefix=' + encodeURIComponent(prefix) : '');
    source = new EventSource(url);
    source.onopen = () => {
      connected = true;
      state.opens++;
      setStatus();
    };
    source.onmessage = (e) => {
      const m = JSON.parse(e.data);
      const t = Date.parse(m.now);
      if (!Number.isNaN(t)) skew = t - Date.now();
      view = m.view;
      state.messages++;
      render();
    };
    source.addEventListener('logout', () => location.reload());
    source.onerror = () => {
      connected = false;
      setStatus();
      if (source.readyState === EventSource.CLOSED) {
        // The server refused the stream (the token expired, say): the page
        // itself says why.
        setTimeout(() => location.reload(), 2000);
      }
    };
  }

  // The filter applies at once, without a reload, and stays in the URL.
  $('filter').addEventListener('submit', (e) => {
    e.preventDefault();
    prefix = $('prefix').value;
    $('empty-under').textContent = prefix ? ' under “' + prefix + '”' : '';
    const u = new URL(location.href);
    u.search = prefix ? '?' + new URLSearchParams({ prefix: prefix }) : '';
    history.replaceState(null, '', u);
    connect();
  });

  connect();
  setInterval(tick, 1000);
})();
