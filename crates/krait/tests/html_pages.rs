//! The HTML pages in a real headless browser (Debian's `chromium`, which `scripts/browser-deps` installs): a
//! reject report that `krait verify` produced, written by `krait report show --format html`, and the status
//! page and `/reports/ID` of a running `krait serve`. For each page the browser's DOM must hold the drawn
//! cycle (one `class="txn"` node per transaction of the cycle), its screenshot must not be blank, and its
//! console must stay silent: the pages run no script, so any console line is an error or a blocked script.
//!
//! A machine without chromium fails these tests, saying how to install it: a skipped browser check must
//! never count as a pass.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, krait, write_serve_config};
use verifier::{Report, ReportStore};

/// The longest one browser run may take before the test gives up on it.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(90);

/// The browser: `$KRAIT_CHROMIUM`, or `chromium` on the PATH. Panics, saying how to install it, when
/// there is none.
fn chromium() -> PathBuf {
    let candidate =
        std::env::var_os("KRAIT_CHROMIUM").map_or_else(|| PathBuf::from("chromium"), PathBuf::from);
    let runs = Command::new(&candidate)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        runs,
        "the headless browser {} is missing: these tests render the HTML pages in it. Install it with \
         `bash scripts/browser-deps` (Debian: apt-get install -y chromium), or set KRAIT_CHROMIUM",
        candidate.display()
    );
    candidate
}

/// What the browser made of one page.
struct Rendered {
    /// The DOM after loading, serialised.
    dom: String,
    /// The screenshot (1200×900).
    png: PathBuf,
    /// The console lines the browser logged while loading the page, twice (once per run).
    console: Vec<String>,
}

/// Runs the browser on `args` plus `url`, bounded by [`BROWSER_TIMEOUT`]; returns stdout and stderr.
fn run_browser(profile: &Path, args: &[&str], url: &str) -> (String, String) {
    let mut child = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        .args(["--hide-scrollbars", "--enable-logging=stderr", "--v=0"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the browser starts");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + BROWSER_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waits for the browser") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the browser took more than {BROWSER_TIMEOUT:?} on {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (out, err) = (out.join().expect("reads stdout"), err.join().expect("reads stderr"));
    assert!(status.success(), "the browser failed on {url} ({status}):\n{err}");
    (out, err)
}

/// The console lines of a browser's log: chromium logs every console message, script errors and blocked
/// scripts included, as `...:INFO:CONSOLE:N] "message", source: URL (N)` (`CONSOLE(N)` before 2024).
fn console_lines(log: &str) -> Vec<String> {
    log.lines().filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught")).map(str::to_owned).collect()
}

/// Loads `url` twice: once for the DOM, once for a 1200×900 screenshot in `dir/name.png`.
fn render(dir: &Path, name: &str, url: &str) -> Rendered {
    let profile = dir.join(format!("{name}-profile"));
    let (dom, log) = run_browser(&profile, &["--dump-dom"], url);
    let png = dir.join(format!("{name}.png"));
    let shot = format!("--screenshot={}", png.display());
    let (_, shot_log) = run_browser(&profile, &[&shot, "--window-size=1200,900"], url);
    assert!(png.is_file(), "no screenshot of {url}:\n{shot_log}");
    let mut console = console_lines(&log);
    console.extend(console_lines(&shot_log));
    Rendered { dom, png, console }
}

/// Pixel counts of a screenshot: how many are not (nearly) white, and how many are the red of an rw edge.
fn ink(png: &Path) -> (usize, usize) {
    let file = std::fs::File::open(png).expect("the screenshot opens");
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("the screenshot is a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a sane size")];
    let frame = reader.next_frame(&mut buf).expect("the screenshot decodes");
    assert_eq!((frame.width, frame.height), (1200, 900), "the window size asked for");
    let channels = frame.color_type.samples();
    assert!(channels >= 3, "a colour screenshot: {:?}", frame.color_type);
    let pixels = buf[..frame.buffer_size()].chunks_exact(channels);
    let (mut inked, mut red) = (0, 0);
    for p in pixels {
        let (r, g, b) = (p[0], p[1], p[2]);
        if r < 235 || g < 235 || b < 235 {
            inked += 1;
        }
        // The rw edges' #c0392b, antialiased.
        if r > 150 && g < 110 && b < 110 {
            red += 1;
        }
    }
    (inked, red)
}

/// A screenshot with the cycle drawn: plenty of ink, and red arrows among it.
fn assert_drawn(page: &Rendered, what: &str) {
    let (inked, red) = ink(&page.png);
    assert!(inked > 5_000, "{what}: the screenshot is (nearly) blank: {inked} non-white pixels");
    assert!(red > 100, "{what}: no rw edge visible in the screenshot: {red} red pixels");
}

/// How many nodes of class `txn` the DOM's drawings hold.
fn txn_nodes(dom: &str) -> usize {
    dom.matches("class=\"txn\"").count()
}

/// The transactions the report's cycles draw, anomaly by anomaly.
fn cycle_transactions(report: &Report) -> usize {
    report
        .anomalies
        .iter()
        .map(|a| {
            let mut ids: Vec<u64> = a.cycle.iter().flat_map(|e| [e.from.0, e.to.0]).collect();
            ids.extend(a.ops.iter().map(|o| o.txn.0));
            ids.sort_unstable();
            ids.dedup();
            ids.len()
        })
        .sum()
}

/// A write skew (each doctor went off call after seeing the other on call), with statement texts that
/// would be markup and script if the page did not escape them.
const WRITE_SKEW: &str = r#"{"krait_history":{"version":1,"statements":2,"keys":2,"transactions":2,"gaps":0}}
{"stmt":"UPDATE doctors SET on_call = false WHERE name = 'alice' /* <script>document.title='pwned'</script> */"}
{"stmt":"UPDATE doctors SET on_call = false WHERE name = \"bob\" AND note <> '</td><img src=x onerror=alert(1)>'"}
{"key":{"name":"alice","ns":"","utf8":"alice"}}
{"key":{"name":"bob","ns":"","utf8":"bob"}}
{"txn":{"id":1,"session":1,"seq":0,"outcome":"committed","ops":[{"r":"alice","pre":0},{"r":"bob","pre":0},{"w":"alice","v":1,"stmt":0}]}}
{"txn":{"id":2,"session":2,"seq":0,"outcome":"committed","ops":[{"r":"alice","pre":0},{"r":"bob","pre":0},{"w":"bob","v":2,"stmt":1}]}}
"#;

/// Verifies the write skew with `krait verify` and stores its report in `data`'s reports directory, as
/// `krait serve` would; returns the report and its id.
fn stored_write_skew_report(dir: &Path, data: &Path) -> (Report, String) {
    let history = dir.join("write-skew.jsonl");
    std::fs::write(&history, WRITE_SKEW).expect("writes the history");
    let json = dir.join("report.json");
    let out = krait(&[
        "verify",
        history.to_str().expect("utf-8 path"),
        "--report-out",
        json.to_str().expect("utf-8 path"),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("write skew"), "{stdout}");
    let report = Report::from_json(&std::fs::read_to_string(&json).expect("reads the report"))
        .expect("the report parses");
    let id = ReportStore::open(data).expect("opens the store").save(&report).expect("stores the report");
    (report, id)
}

/// What every page must be in the browser: silent, escaped, and with the cycle drawn.
fn assert_report_page(page: &Rendered, report: &Report, what: &str) {
    assert!(page.console.is_empty(), "{what}: console errors:\n{}", page.console.join("\n"));
    assert!(page.dom.contains("<svg"), "{what}: no SVG in the DOM:\n{}", page.dom);
    let expected = cycle_transactions(report);
    assert_eq!(expected, 2, "a write skew is a cycle of two transactions");
    assert_eq!(txn_nodes(&page.dom), expected, "{what}: one node per transaction:\n{}", page.dom);
    // The recorded SQL is shown as text, not run or parsed as markup.
    assert!(!page.dom.contains("<script") && !page.dom.contains("<img"), "{what}:\n{}", page.dom);
    assert!(page.dom.contains("&lt;script&gt;document.title="), "{what}: the SQL is shown:\n{}", page.dom);
    assert!(page.dom.contains("<title>Krait report: REJECT"), "{what}: the title was not changed");
    assert!(page.dom.contains("REJECT: not serializable: write skew"), "{what}:\n{}", page.dom);
    assert_drawn(page, what);
}

/// The console check works: a page with a failing script and a script the policy blocks is caught.
#[test]
fn the_browser_console_check_sees_script_errors() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let page = dir.path().join("broken.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" content=\"script-src \
         'sha256-AAAA'\"></head><body><p>x</p><script>blocked()</script></body></html>",
    )
    .expect("writes the page");
    let rendered = render(dir.path(), "broken", &format!("file://{}", page.display()));
    assert!(!rendered.console.is_empty(), "a blocked script went unnoticed");
    std::fs::write(&page, "<!DOCTYPE html><html><body><script>undefinedFunction()</script></body></html>")
        .expect("writes the page");
    let rendered = render(dir.path(), "failing", &format!("file://{}", page.display()));
    assert!(rendered.console.iter().any(|l| l.contains("Uncaught")), "{:?}", rendered.console);
    // A blank page has no ink.
    assert!(ink(&rendered.png).0 < 100);
}

#[test]
fn a_reject_report_as_html_draws_its_cycle_in_a_browser() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().join("data");
    let (report, id) = stored_write_skew_report(dir.path(), &data);
    let out =
        krait(&["report", "show", &id, "--data-dir", data.to_str().expect("utf-8"), "--format", "html"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = dir.path().join("report.html");
    std::fs::write(&html, &out.stdout).expect("writes the page");
    let page = render(dir.path(), "report", &format!("file://{}", html.display()));
    assert_report_page(&page, &report, "report show --format html");
    // The prose of each edge and the statements are on the page.
    for e in &report.anomalies[0].cycle {
        let key = e.key.as_deref().expect("a write skew's edges name keys");
        assert!(page.dom.contains(&format!("rw({key})")), "{}", page.dom);
    }
    assert!(page.dom.contains("WHERE name = \"bob\""), "{}", page.dom);
}

/// One HTTP/1.1 GET; returns the status code and the body.
fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connects to the admin server");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("sets a timeout");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("sends");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("reads the reply");
    let code = response.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default())
}

/// A running `krait serve`, stopped (SIGTERM, then waited for) when dropped, also when a test fails.
struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a status page must be in the browser: silent, titled, with the verifier's numbers, a link to
/// report `id`, and ink on its screenshot.
fn assert_status_page(status: &Rendered, id: &str) {
    assert!(status.console.is_empty(), "status page: console errors:\n{}", status.console.join("\n"));
    assert!(status.dom.contains("<title>Krait status</title>"), "{}", status.dom);
    assert!(status.dom.contains("transactions verified"), "the verifier's numbers:\n{}", status.dom);
    assert!(status.dom.contains(&format!("href=\"/reports/{id}\"")), "{}", status.dom);
    let (inked, _) = ink(&status.png);
    assert!(inked > 5_000, "the status page's screenshot is (nearly) blank: {inked} non-white pixels");
}

#[test]
fn the_status_page_links_to_reports_and_serves_them_in_a_browser() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().join("data");
    let (report, id) = stored_write_skew_report(dir.path(), &data);
    let (port, admin_port) = (free_port(), free_port());
    let config = write_serve_config(dir.path(), port, Some(admin_port), "");
    let child = Command::new(env!("CARGO_BIN_EXE_krait"))
        .args(["serve", "--config", config.to_str().expect("utf-8 path")])
        .args(["--data-dir", data.to_str().expect("utf-8 path")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts krait serve");
    let _serve = Serve(child);
    let admin = format!("127.0.0.1:{admin_port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(&admin).is_err() {
        assert!(Instant::now() < deadline, "krait serve's admin server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }

    // The verifier's state reaches the admin server within a quarter second of the start.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (code, body) = http_get(&admin, "/api/status");
        assert_eq!(code, 200, "{body}");
        if !body.contains("\"verifier\":null") {
            break;
        }
        assert!(Instant::now() < deadline, "the verifier never attached: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, body) = http_get(&admin, "/");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&format!("href=\"/reports/{id}\"")), "the status page links to {id}:\n{body}");
    // Each listed with its cycle in a few words, keys included.
    assert!(
        body.contains("</a> write skew: T") && body.contains("-rw(alice)-&gt;"),
        "{id} in a line:\n{body}"
    );
    // Only the store's ids reach it: no traversal, no other file.
    for bad in ["/reports/../../etc/passwd", "/reports/..%2F..%2Fetc%2Fpasswd", "/reports/r000001.json"] {
        assert_eq!(http_get(&admin, bad).0, 404, "{bad}");
    }
    assert_eq!(http_get(&admin, "/reports/r999999").0, 404);

    assert_status_page(&render(dir.path(), "status", &format!("http://{admin}/")), &id);

    let page = render(dir.path(), "served", &format!("http://{admin}/reports/{id}"));
    assert_report_page(&page, &report, "/reports/ID");
}

/// `krait serve --verify-only`'s status server serves the same pages: a status page that names the stream
/// and links to the stored reports, and each report drawn.
#[test]
fn the_verify_only_status_page_links_to_reports_and_serves_them_in_a_browser() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().join("data");
    let (report, id) = stored_write_skew_report(dir.path(), &data);
    let nats = ship::local::LocalNats::start(&dir.path().join("nats")).unwrap_or_else(|e| panic!("{e}"));
    let admin = format!("127.0.0.1:{}", free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_krait"))
        .args(["serve", "--verify-only", "--source", &nats.url(), "--admin", &admin])
        .args(["--data-dir", data.to_str().expect("utf-8 path")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts krait serve --verify-only");
    let _serve = Serve(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if std::net::TcpStream::connect(&admin).is_ok() {
            let (code, body) = http_get(&admin, "/api/status");
            if code == 200 && body.contains("\"verifier\"") {
                assert!(body.contains(&format!("\"source\":\"{}\"", nats.url())), "{body}");
                break;
            }
        }
        assert!(Instant::now() < deadline, "the verify-only status server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    for bad in ["/reports/../../etc/passwd", "/reports/r000001.json", "/reports/r999999"] {
        assert_eq!(http_get(&admin, bad).0, 404, "{bad}");
    }

    let status = render(dir.path(), "verify-only-status", &format!("http://{admin}/"));
    assert_status_page(&status, &id);
    assert!(status.dom.contains(&format!("ship to <code>{}</code>", nats.url())), "{}", status.dom);
    assert!(status.dom.contains("<h2>Collectors</h2>"), "{}", status.dom);

    let page = render(dir.path(), "verify-only-report", &format!("http://{admin}/reports/{id}"));
    assert_report_page(&page, &report, "verify-only /reports/ID");
}
