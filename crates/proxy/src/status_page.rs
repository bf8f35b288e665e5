//! The admin server's HTML pages: `GET /`, a status page for a person (what `/api/status` reports, the
//! throughput, and links to the reject reports) that reloads itself every few seconds, and `GET /reports/ID`,
//! one report's page. `krait serve --verify-only`'s status server serves the same pages from its own
//! `/api/status`, which names the stream it reads and lists each collector instead of a listen address.
//!
//! The proxy does not know what a report is: whoever starts it (`krait serve`) hands it a [`ReportPages`]
//! that lists reports and renders one as HTML. A proxy started without one (`krait proxy`) says on its
//! status page that it keeps no reports, and answers 404 under `/reports/`.
//!
//! Everything shown is escaped: report titles quote recorded SQL, which clients wrote. The pages run no
//! script (a `<meta>` refresh reloads the status page) and load nothing, which their Content-Security-Policy
//! enforces.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use history::html::escape;

/// How often the status page reloads itself, in seconds.
pub const REFRESH_SECONDS: u32 = 5;

/// How many reports the status page links to, newest first.
pub const REPORTS_LISTED: usize = 50;

/// The status page's Content-Security-Policy: inline styles only, nothing fetched, no script.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'";

/// One stored report, as the status page lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportLink {
    /// Its id, as `/reports/ID` takes it.
    pub id: String,
    /// Its one-line verdict.
    pub verdict: String,
}

/// The newest reports and how many there are in all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportList {
    /// How many reports are stored.
    pub total: usize,
    /// The newest ones, newest first.
    pub newest: Vec<ReportLink>,
}

/// Where the admin server finds reject reports. Calls block (they read files), so the server makes them
/// off its event loop.
///
/// ```
/// use proxy::status_page::{ReportList, ReportPages};
///
/// struct NoReports;
/// impl ReportPages for NoReports {
///     fn newest(&self, _limit: usize) -> Result<ReportList, String> {
///         Ok(ReportList::default())
///     }
///     fn page(&self, _id: &str) -> Result<Option<String>, String> {
///         Ok(None)
///     }
/// }
/// let reports: std::sync::Arc<dyn ReportPages> = std::sync::Arc::new(NoReports);
/// assert_eq!(reports.newest(10).unwrap().total, 0);
/// ```
pub trait ReportPages: Send + Sync {
    /// The newest `limit` reports, newest first, and the total; `Err` says why they cannot be listed.
    fn newest(&self, limit: usize) -> Result<ReportList, String>;

    /// Report `id` as one self-contained HTML page; `Ok(None)` when there is no such report or `id` is not
    /// of the store's form (the server answers 404); `Err` when it exists but cannot be read.
    fn page(&self, id: &str) -> Result<Option<String>, String>;
}

/// The newest reports, listed off the event loop: listing reads files, and every client of an admin server
/// shares its loop.
pub async fn newest_reports(reports: Arc<dyn ReportPages>) -> Result<ReportList, String> {
    tokio::task::spawn_blocking(move || reports.newest(REPORTS_LISTED))
        .await
        .unwrap_or_else(|e| Err(e.to_string()))
}

/// Report `id`'s page, read off the event loop; `Ok(None)` (404) for an id that cannot name a report or is
/// not stored.
pub async fn report_page(reports: Arc<dyn ReportPages>, id: &str) -> Result<Option<String>, String> {
    // The id comes straight from the request line: nothing but letters and digits may reach the store.
    if !plausible_id(id) {
        return Ok(None);
    }
    let id = id.to_owned();
    tokio::task::spawn_blocking(move || reports.page(&id)).await.map_err(|e| e.to_string())?
}

/// Whether `id` could name a report at all: a short run of ASCII letters and digits. Anything else (a
/// slash, a dot, a percent sign of an encoded slash) is refused before the store sees it, which also checks
/// its own form.
pub(crate) fn plausible_id(id: &str) -> bool {
    (1..=32).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The committed-transaction counter as the status page saw it over the last minute, for a throughput
/// that follows the load rather than averaging it over the whole uptime.
#[derive(Debug, Default)]
pub struct Throughput {
    samples: Mutex<VecDeque<(Instant, u64)>>,
}

/// How far back the throughput looks.
const THROUGHPUT_WINDOW: Duration = Duration::from_secs(60);

impl Throughput {
    /// Records `committed` at `now` and returns the transactions per second since the oldest sample of the
    /// last minute, or `None` when there is no sample at least a second old.
    pub fn rate(&self, now: Instant, committed: u64) -> Option<f64> {
        let Ok(mut samples) = self.samples.lock() else { return None };
        while samples.front().is_some_and(|(at, _)| now.saturating_duration_since(*at) > THROUGHPUT_WINDOW) {
            samples.pop_front();
        }
        let rate = samples.front().and_then(|&(at, n)| {
            let secs = now.saturating_duration_since(at).as_secs_f64();
            (secs >= 1.0).then(|| committed.saturating_sub(n) as f64 / secs)
        });
        samples.push_back((now, committed));
        rate
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#222}\
.tiles{display:flex;flex-wrap:wrap;gap:.8em}.tile{border:1px solid #ccc;border-radius:6px;padding:.6em 1em;\
min-width:9em}.tile b{display:block;font-size:1.5em}.bad{color:#a4161a}.ok{color:#1b7f3b}\
table{border-collapse:collapse;margin:.3em 2em 1em 0;display:inline-table;vertical-align:top}\
td,th{border:1px solid #ddd;padding:.2em .6em;text-align:left}td.n{font-family:ui-monospace,monospace}\
li{margin:.2em 0}";

/// What the status page shows beyond `/api/status`: the throughput and the reports.
pub struct PageExtras {
    /// Committed transactions per second over the last minute of page views, if known.
    pub recent_rate: Option<f64>,
    /// `None` when the server has no report store.
    pub reports: Option<Result<ReportList, String>>,
}

/// The committed transactions a status document counts: the proxy's, or else (a verifier fed by shipped
/// logs) the verifier's.
pub fn committed(status: &serde_json::Value) -> u64 {
    status["transactions"]["committed"]
        .as_u64()
        .or_else(|| status["verifier"]["committed"].as_u64())
        .unwrap_or(0)
}

/// The status page, from `/api/status`'s document and the extras.
pub fn render(status: &serde_json::Value, extras: &PageExtras) -> String {
    let mut out = String::with_capacity(8 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Krait status</title><style>{STYLE}</style></head><body>\n<h1>Krait {}</h1>\n",
        escape(status["version"].as_str().unwrap_or(""))
    );
    let serving = match status["source"].as_str() {
        Some(source) => format!(
            "This verifier reads the logs the proxies ship to <code>{}</code> (stream <code>{}</code>)",
            escape(source),
            escape(status["stream"].as_str().unwrap_or(""))
        ),
        None => format!(
            "Clients connect to <code>{}</code>; the database is at <code>{}</code>",
            escape(status["listen"].as_str().unwrap_or("")),
            escape(status["upstream"].as_str().unwrap_or(""))
        ),
    };
    let _ = writeln!(
        out,
        "<p>{serving}; up {} s. This page reloads every {REFRESH_SECONDS} s; <a href=\"/api/status\">\
         /api/status</a> and <a href=\"/metrics\">/metrics</a> have the same numbers for machines.</p>",
        status["uptime_s"]
    );
    write_tiles(&mut out, status, extras);
    write_reports(&mut out, extras);
    write_collectors(&mut out, status);
    out.push_str("<h2>Details</h2>\n");
    if let Some(sections) = status.as_object() {
        for (name, value) in sections {
            if let Some(fields) = value.as_object() {
                let _ =
                    write!(out, "<table class=\"section\"><tr><th colspan=\"2\">{}</th></tr>", escape(name));
                for (field, v) in fields {
                    let shown = match v {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    let _ = write!(
                        out,
                        "<tr><td>{}</td><td class=\"n\">{}</td></tr>",
                        escape(field),
                        escape(&shown)
                    );
                }
                out.push_str("</table>\n");
            }
        }
    }
    out.push_str("</body></html>\n");
    out
}

/// The numbers a person looks at first: throughput, verification, lag, rejects.
fn write_tiles(out: &mut String, status: &serde_json::Value, extras: &PageExtras) {
    // The tiles go into their own string, which the closure may borrow alone.
    let mut tiles = String::new();
    let mut tile = |label: &str, value: String, class: &str| {
        let _ = write!(tiles, "<div class=\"tile {class}\"><b>{}</b>{}</div>", escape(&value), escape(label));
    };
    let committed = committed(status);
    let uptime = status["uptime_s"].as_u64().unwrap_or(0).max(1);
    tile("transactions committed", committed.to_string(), "");
    match extras.recent_rate {
        Some(rate) => tile("committed per second (last minute)", format!("{rate:.1}"), ""),
        None => {
            tile("committed per second (since start)", format!("{:.1}", committed as f64 / uptime as f64), "")
        }
    }
    let v = &status["verifier"];
    if v.is_object() {
        let behind = v["behind"].as_bool().unwrap_or(false);
        tile("transactions verified", v["verified"].to_string(), "");
        tile("verification rounds", v["rounds"].to_string(), "");
        let lag =
            format!("{} txns, {:.1} s", v["lag_transactions"], v["lag_seconds"].as_f64().unwrap_or(0.0));
        let (label, class) = if behind { ("lag: the verifier is behind", "bad") } else { ("lag", "ok") };
        tile(label, lag, class);
        let rejects = v["rejects"].as_u64().unwrap_or(0);
        tile("rejects found since start", rejects.to_string(), if rejects > 0 { "bad" } else { "ok" });
    } else {
        tile("verifier", "not attached".to_owned(), "");
    }
    let _ = writeln!(out, "<div class=\"tiles\">{tiles}</div>");
}

/// One row per collector whose log the verifier reads (`/api/status`'s `collectors`), if it lists any.
fn write_collectors(out: &mut String, status: &serde_json::Value) {
    let Some(collectors) = status["collectors"].as_array() else { return };
    out.push_str("<h2>Collectors</h2>\n");
    let Some(first) = collectors.first().and_then(|c| c.as_object()) else {
        out.push_str("<p>No collector has shipped yet.</p>\n");
        return;
    };
    out.push_str("<table class=\"collectors\"><tr>");
    for field in first.keys() {
        let _ = write!(out, "<th>{}</th>", escape(&field.replace('_', " ")));
    }
    out.push_str("</tr>\n");
    for c in collectors {
        out.push_str("<tr>");
        for field in first.keys() {
            let shown = match &c[field] {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => String::new(),
                other => other.to_string(),
            };
            let _ = write!(out, "<td class=\"n\">{}</td>", escape(&shown));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// The links to the newest reports.
fn write_reports(out: &mut String, extras: &PageExtras) {
    out.push_str("<h2>Reject reports</h2>\n");
    match &extras.reports {
        None => out.push_str(
            "<p>This admin server keeps no reports: the proxy runs without a verifier (run <code>krait \
             serve</code> for one).</p>\n",
        ),
        Some(Err(e)) => {
            let _ = writeln!(out, "<p class=\"bad\">The reports cannot be listed: {}</p>", escape(e));
        }
        Some(Ok(list)) if list.total == 0 => out.push_str("<p class=\"ok\">No reject reports.</p>\n"),
        Some(Ok(list)) => {
            let _ = writeln!(
                out,
                "<p>{} report(s){}.</p>\n<ul class=\"reports\">",
                list.total,
                if list.total > list.newest.len() { ", the newest listed" } else { "" }
            );
            for r in &list.newest {
                let id = escape(&r.id);
                let _ = writeln!(
                    out,
                    "<li><a class=\"report\" href=\"/reports/{id}\">{id}</a> {}</li>",
                    escape(&r.verdict)
                );
            }
            out.push_str("</ul>\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_alphanumeric_ids_reach_the_store() {
        assert!(plausible_id("r000001"));
        for bad in ["", "..", "r0/../x", "r%2e%2e", "r000001.json", "r 1", &"r".repeat(33)] {
            assert!(!plausible_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_status_page_escapes_report_titles_and_links_each_report() {
        let status = serde_json::json!({
            "version": "0.1.0", "listen": "127.0.0.1:1", "upstream": "db<1>", "uptime_s": 3,
            "transactions": {"committed": 6},
        });
        let extras = PageExtras {
            recent_rate: None,
            reports: Some(Ok(ReportList {
                total: 1,
                newest: vec![ReportLink {
                    id: "r000001".into(),
                    verdict: "REJECT: '<script>x</script>'".into(),
                }],
            })),
        };
        let html = render(&status, &extras);
        assert!(html.contains("<a class=\"report\" href=\"/reports/r000001\">r000001</a>"), "{html}");
        assert!(!html.contains("<script") && html.contains("&#39;&lt;script&gt;"), "{html}");
        assert!(html.contains("db&lt;1&gt;") && html.contains("http-equiv=\"refresh\""), "{html}");
        assert!(html.contains("<b>2.0</b>committed per second (since start)"), "{html}");
        assert!(!html.contains("<h2>Collectors"), "a proxy lists no collectors:\n{html}");
    }

    #[test]
    fn a_verifier_of_shipped_logs_shows_its_stream_and_each_collector() {
        let status = serde_json::json!({
            "version": "0.1.0", "source": "nats://127.0.0.1:4222", "stream": "KRAIT", "uptime_s": 2,
            "verifier": {"committed": 8, "verified": 8, "rounds": 1, "rejects": 0},
            "collectors": [
                {"collector": 1, "records": 30, "holes": [], "silent_s": 0.5},
                {"collector": 2, "records": 12, "holes": [{"from": 4, "to": 9}], "silent_s": null},
            ],
        });
        let html =
            render(&status, &PageExtras { recent_rate: None, reports: Some(Ok(ReportList::default())) });
        assert!(
            html.contains("ship to <code>nats://127.0.0.1:4222</code> (stream <code>KRAIT</code>)"),
            "{html}"
        );
        assert!(html.contains("<b>8</b>transactions committed"), "{html}");
        // Fields in the document's order (serde_json's maps are sorted by name).
        assert!(html.contains("<th>collector</th><th>holes</th><th>records</th><th>silent s</th>"), "{html}");
        let hole = "[{&quot;from&quot;:4,&quot;to&quot;:9}]";
        assert!(
            html.contains(&format!(
                "<td class=\"n\">2</td><td class=\"n\">{hole}</td><td class=\"n\">12</td>"
            )),
            "{html}"
        );
    }

    #[test]
    fn throughput_follows_the_last_minute() {
        let t = Throughput::default();
        let start = Instant::now();
        assert_eq!(t.rate(start, 0), None);
        assert_eq!(t.rate(start + Duration::from_millis(500), 10), None);
        assert_eq!(t.rate(start + Duration::from_secs(2), 100), Some(50.0));
        // Two minutes later only the last minute's samples count.
        let later = start + Duration::from_secs(120);
        assert_eq!(t.rate(later, 100), None);
        assert_eq!(t.rate(later + Duration::from_secs(10), 600), Some(50.0));
    }
}
