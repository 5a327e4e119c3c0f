"""The captures page: server-rendered HTML and a little JavaScript (no build step).

One row per capture of the caller's organization, `PAGE_SIZE` registered captures per
page (``/captures?after=<cursor>``: the platform's `page_captures`, one bounded query
whatever the number of captures): kind, duration, quality status and
export gate, and one cell per export with its state, a button that asks the API for it
(``POST``), a progress bar that follows the run (``GET`` every 0.5 s) and, once ready,
the download link, which the page also opens. A stale artefact is marked ``stale``.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Callable
from typing import Any

from fastapi.responses import HTMLResponse

from ego_assets.api.config import ApiConfig, Caller
from ego_assets.api.service import Artifact
from ego_assets.api.snapshot import ServedStates
from ego_assets.dagster_client import export_target
from ego_assets.exports import registry
from ego_assets.pipeline import stored_gate
from ego_assets.trajectory.store import CAPTURE_JSON

PAGE_SIZE = 100  # registered captures per page


class CursorError(ValueError):
    """``after`` is not a captures page cursor."""


def captures_rows(
    served: ServedStates,
    config: ApiConfig,
    caller: Caller,
    download_url: Callable[[Artifact], str],
    after: str | None = None,
    limit: int = PAGE_SIZE,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page's rows (the captures of the caller's organization among ``limit``
    registered ones after cursor ``after``, in registration order) and the next cursor."""
    rows = []
    storage = served.service.storage
    try:
        keys, next_after = served.service.capture_page(after, limit)
    except ValueError as exc:  # e.g. not base64: Dagster's words stay in the log
        raise CursorError("not a captures page cursor") from exc
    for key in (k for k in keys if config.owns(caller, k)):
        row: dict[str, Any] = {"id": key, "kind": "", "duration": None, "quality": "", "gate": ""}
        header = storage.stage_path("trajectory", key) / CAPTURE_JSON
        if header.exists():
            doc = json.loads(header.read_text())
            row["kind"] = doc["info"]["source_kind"]
            row["duration"] = float(doc["duration_s"])
        gate = stored_gate(storage, key)
        if gate is not None:
            row["quality"], row["gate"] = gate.status, gate.verdict
            row["reasons"] = list(gate.reasons)
        blocked = served.service.blocked_formats(key, gate)
        row["blocked"] = {fmt: str(refusal) for fmt, refusal in blocked.items()}
        exports = {}
        for fmt in registry.names():
            target = export_target(key, fmt)
            state = served.cached(target) or served.load(target)
            exports[fmt] = state.to_json(download_url)
        row["exports"] = exports
        rows.append(row)
    return rows, next_after


def _cell(key: str, fmt: str, state: dict[str, Any], blocked: str | None) -> str:
    """An export's cell; its button disabled, with the gate's reasons as its title, when
    the export policy blocks the export."""
    export = registry.by_name(fmt)
    data = html.escape(json.dumps(state), quote=True)
    refused = ""
    if blocked:
        refused = f' disabled title="{html.escape(blocked, quote=True)}" data-blocked="1"'
    return (
        f'<td class="export" data-capture="{html.escape(key)}" data-route="{export.route}" '
        f'data-state="{data}"><button type="button"{refused}>Export {export.label}</button>'
        '<progress max="1" value="0" hidden></progress><span class="state"></span> '
        '<a class="download" hidden>download</a></td>'
    )


def render_page(caller: Caller, rows: list[dict[str, Any]], next_url: str | None = None) -> str:
    head = "".join(f"<th>{f.label}</th>" for f in registry.formats())
    body = []
    for row in rows:
        duration = f"{row['duration']:.1f} s" if row["duration"] is not None else ""
        reasons = html.escape("; ".join(row.get("reasons", [])), quote=True)
        cells = "".join(
            _cell(row["id"], f, row["exports"][f], row.get("blocked", {}).get(f))
            for f in registry.names()
        )
        body.append(
            f'<tr id="capture-{html.escape(row["id"])}"><td>{html.escape(row["id"])}</td>'
            f"<td>{html.escape(row['kind'])}</td><td>{duration}</td>"
            f'<td class="quality {html.escape(row["quality"])}">{html.escape(row["quality"])}'
            f'</td><td class="gate {html.escape(row["gate"])}" title="{reasons}">'
            f"{html.escape(row['gate'])}</td>{cells}</tr>"
        )
    more = (
        f'<p><a id="next-page" href="{html.escape(next_url, quote=True)}">next page</a></p>'
        if next_url
        else ""
    )
    return PAGE.format(
        org=html.escape(caller.organization),
        head=head,
        rows="".join(body) or '<tr><td colspan="8">no captures on this page</td></tr>',
        more=more,
    )


def login_page(problem: str = "") -> str:
    note = f'<p class="error">{html.escape(problem)}</p>' if problem else ""
    return LOGIN.format(note=note)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; } th, td { padding: .35em .7em; border-bottom: 1px solid #ddd;
text-align: left; } .blocked, .fail, .failed { color: #b00020; } .warn { color: #a66b00; }
.pass, .allowed, .ready { color: #176b2c; } .stale { color: #a66b00; font-weight: bold; }
progress { width: 6em; vertical-align: middle; } .export span { margin-left: .4em; }
"""

LOGIN = (
    "<!doctype html><html><head><meta charset='utf-8'><title>ego_assets: sign in</title>"
    "<style>" + STYLE.replace("{", "{{").replace("}", "}}") + "</style></head><body>"
    "<h1>Captures</h1>{note}"
    "<form method='post' action='/login'><label>API token "
    "<input type='password' name='token' id='token' autocomplete='off'></label> "
    "<button type='submit' id='sign-in'>Sign in</button></form></body></html>"
)

SCRIPT = """
const POLL_MS = 500;
function show(cell, s) {
  const bar = cell.querySelector('progress'), text = cell.querySelector('.state');
  const link = cell.querySelector('a.download'), button = cell.querySelector('button');
  const open = s.status === 'queued' || s.status === 'in_progress';
  bar.hidden = !open; bar.value = s.progress || 0;
  let label = s.status === 'none' ? '' : s.status.replace('_', ' ');
  if (open && s.phase) label += ' (' + s.phase + ')';
  if (s.status === 'in_progress') label += ' ' + Math.round(100 * s.progress) + '%';
  if (s.error) label += ': ' + s.error;
  text.textContent = label; text.className = 'state ' + s.status;
  button.disabled = open || button.dataset.blocked === '1';
  const a = s.artifact;
  link.hidden = !a || open;
  if (a) {
    link.href = a.downloadUrl; link.textContent = a.filename;
    link.setAttribute('download', a.filename);
    if (!a.current && !open) text.innerHTML += ' <span class="stale">stale</span>';
  }
}
async function call(cell, method) {
  const url = '/captures/' + encodeURIComponent(cell.dataset.capture) + '/' + cell.dataset.route;
  const init = {method, headers: {'x-ego-page': '1'}, credentials: 'same-origin'};
  if (method === 'POST') {
    init.headers['content-type'] = 'application/json'; init.body = '{}';
  }
  const response = await fetch(url, init);
  const body = await response.json();
  if (!response.ok) throw new Error(body.detail || response.statusText);
  return body;
}
async function follow(cell, state) {
  show(cell, state);
  while (state.status === 'queued' || state.status === 'in_progress') {
    await new Promise(r => setTimeout(r, POLL_MS));
    state = await call(cell, 'GET');
    show(cell, state);
  }
  if (state.status === 'ready' && state.artifact) {
    cell.dataset.downloaded = state.artifact.filename;
    cell.querySelector('a.download').click();
  }
}
for (const cell of document.querySelectorAll('td.export')) {
  const state = JSON.parse(cell.dataset.state);
  show(cell, state);
  if (state.status === 'queued' || state.status === 'in_progress') follow(cell, state);
  cell.querySelector('button').addEventListener('click', async () => {
    try { await follow(cell, await call(cell, 'POST')); }
    catch (e) { cell.querySelector('.state').textContent = 'error: ' + e.message; }
  });
}
"""

PAGE = (
    "<!doctype html><html><head><meta charset='utf-8'><title>ego_assets: captures</title>"
    "<style>" + STYLE.replace("{", "{{").replace("}", "}}") + "</style></head><body>"
    "<h1>Captures of {org}</h1><table id='captures'><thead><tr><th>capture</th><th>kind</th>"
    "<th>duration</th><th>quality</th><th>gate</th>{head}</tr></thead><tbody>{rows}"
    "</tbody></table>{more}<script>" + SCRIPT.replace("{", "{{").replace("}", "}}") + "</script>"
    "</body></html>"
)


def _source_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


# The pages' Content-Security-Policy: their own inline script and style only (by hash),
# calls to this server only, never in a frame.
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; script-src {_source_hash(SCRIPT)}; style-src {_source_hash(STYLE)}; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def html_page(text: str, status_code: int = 200) -> HTMLResponse:
    """An HTML answer of the page's with its Content-Security-Policy."""
    headers = {"Content-Security-Policy": CONTENT_SECURITY_POLICY}
    return HTMLResponse(text, status_code, headers=headers)
