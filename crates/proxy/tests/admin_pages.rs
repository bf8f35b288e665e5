//! The admin server's pages for a person, in process: `/` links to the reports its [`ReportPages`] lists,
//! `/reports/ID` serves their pages with a policy that forbids scripts, and ids that are not plain letters
//! and digits never reach the report store. A proxy started without reports says it keeps none.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proxy::status_page::{ReportLink, ReportList, ReportPages};
use proxy::{Config, StartOptions};

/// A report store with one report, `r000001`, and one that cannot be read, `r000666`; it remembers every id
/// it was asked for.
#[derive(Default)]
struct OneReport {
    asked: Mutex<Vec<String>>,
}

impl ReportPages for OneReport {
    fn newest(&self, _limit: usize) -> Result<ReportList, String> {
        let link = ReportLink { id: "r000001".into(), verdict: "REJECT: <b>write skew</b>".into() };
        Ok(ReportList { total: 1, newest: vec![link] })
    }

    fn page(&self, id: &str) -> Result<Option<String>, String> {
        self.asked.lock().map_err(|e| e.to_string())?.push(id.to_owned());
        match id {
            "r000001" => Ok(Some("<!DOCTYPE html><p>the report</p>".into())),
            "r000666" => Err("cannot read r000666".into()),
            _ => Ok(None),
        }
    }
}

/// One HTTP/1.1 GET: the status code, the headers (lower-cased) and the body.
fn get(addr: &str, path: &str) -> (u16, String, String) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("{e}"));
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap_or_else(|e| panic!("{e}"));
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap_or_else(|e| panic!("{e}"));
    let code = response.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (code, head.to_lowercase(), body.to_owned())
}

fn config(dir: &std::path::Path) -> Config {
    let toml = format!(
        "[listen]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:5432\"\n\
         [log]\npath = \"{}\"\n[admin]\naddress = \"127.0.0.1:0\"\n",
        dir.join("log").display()
    );
    Config::parse(&toml, std::path::Path::new("<test>")).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_status_page_links_reports_and_only_plain_ids_reach_the_store() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let rt = rt.unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = Arc::new(OneReport::default());
    let extras = StartOptions { reports: Some(store.clone()), ..StartOptions::default() };
    let handle = rt.block_on(proxy::start_with(config(dir.path()), extras)).unwrap_or_else(|e| panic!("{e}"));
    let admin = handle.admin_addr().map(|a| a.to_string()).unwrap_or_else(|| panic!("an admin address"));

    let (code, head, body) = get(&admin, "/");
    assert_eq!(code, 200, "{body}");
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(head.contains("content-security-policy: default-src 'none'"), "{head}");
    assert!(body.contains("<a class=\"report\" href=\"/reports/r000001\">r000001</a>"), "{body}");
    assert!(body.contains("REJECT: &lt;b&gt;write skew&lt;/b&gt;"), "the verdict is escaped: {body}");
    assert!(body.contains("<meta http-equiv=\"refresh\""), "{body}");
    assert!(body.contains("transactions committed"), "{body}");

    let (code, head, body) = get(&admin, "/reports/r000001");
    assert_eq!((code, body.as_str()), (200, "<!DOCTYPE html><p>the report</p>"));
    assert!(head.contains("content-security-policy") && head.contains("x-content-type-options: nosniff"));
    assert_eq!(get(&admin, "/reports/r000042").0, 404);
    assert_eq!(get(&admin, "/reports/r000666").0, 500);
    for bad in
        ["/reports/../../etc/passwd", "/reports/..%2Fetc%2Fpasswd", "/reports/r000001.json", "/reports/"]
    {
        assert_eq!(get(&admin, bad).0, 404, "{bad}");
    }
    let asked = store.asked.lock().map(|a| a.clone()).unwrap_or_default();
    assert_eq!(asked, ["r000001", "r000042", "r000666"], "only plain ids reach the store");
    rt.block_on(handle.shutdown()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_proxy_without_reports_says_it_keeps_none() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let rt = rt.unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let handle = rt.block_on(proxy::start(config(dir.path()))).unwrap_or_else(|e| panic!("{e}"));
    let admin = handle.admin_addr().map(|a| a.to_string()).unwrap_or_else(|| panic!("an admin address"));
    let (code, _, body) = get(&admin, "/");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("keeps no reports"), "{body}");
    assert_eq!(get(&admin, "/reports/r000001").0, 404);
    rt.block_on(handle.shutdown()).unwrap_or_else(|e| panic!("{e}"));
}
