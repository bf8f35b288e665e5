//! Escaping recorded text for HTML. Recorded SQL and values are what clients wrote, and both the verifier's
//! report pages and the proxy's status page show them, so the one escape they share lives beside the history
//! that holds that text.

/// `text` with `&`, `<`, `>`, `"` and `'` replaced by character references, so that it is text in an HTML
/// element or in a quoted attribute value, whatever it holds.
///
/// ```
/// assert_eq!(history::html::escape("<a href='x'>&\"</a>"), "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;");
/// ```
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
