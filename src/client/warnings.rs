//! The API server's `Warning` response headers (RFC 7234 form, `299 - "text"`): it sends one
//! when a request uses a deprecated API or a field it dropped. kube hands them to no one;
//! client-go logs each distinct one. So do we, once per process, so that a use of an API on
//! its way out shows in the operator's log long before the release that removes it.

use std::collections::HashSet;

use http::Response;
use parking_lot::Mutex;
use tracing::warn;

/// The log message of such a warning (tests look for it).
pub const LOGGED_AS: &str = "the API server warned about a request";

/// Distinct warnings seen; bounded, as a misbehaving server could send endless variants.
static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
const REMEMBERED: usize = 256;

/// Logs the response's warnings not logged before; hands the response on.
pub fn log<B>(response: Response<B>) -> Response<B> {
    for value in response.headers().get_all(http::header::WARNING) {
        let text = warning_text(&String::from_utf8_lossy(value.as_bytes()));
        if first_time(&text) {
            warn!(warning = %text, status = response.status().as_u16(), "{LOGGED_AS}");
        }
    }
    response
}

fn first_time(text: &str) -> bool {
    let mut seen = SEEN.lock();
    let seen = seen.get_or_insert_with(HashSet::new);
    if seen.contains(text) {
        return false;
    }
    if seen.len() < REMEMBERED {
        seen.insert(text.to_string());
    }
    true
}

/// `299 - "policy/v1beta1 PodDisruptionBudget is deprecated"` -> the quoted text; anything
/// else as it came.
fn warning_text(header: &str) -> String {
    header
        .splitn(3, ' ')
        .nth(2)
        .and_then(|t| t.strip_prefix('"')?.strip_suffix('"'))
        .map(|t| t.replace("\\\"", "\""))
        .unwrap_or_else(|| header.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_of_a_warning_header_is_its_quoted_part() {
        assert_eq!(
            warning_text(r#"299 - "batch/v1beta1 CronJob is deprecated in v1.21+""#),
            "batch/v1beta1 CronJob is deprecated in v1.21+"
        );
        assert_eq!(
            warning_text(r#"299 - "unknown field \"spec.foo\"""#),
            r#"unknown field "spec.foo""#
        );
        assert_eq!(warning_text("garbage"), "garbage");
    }

    /// What a subscriber printed while `f` ran.
    fn logged(f: impl FnOnce()) -> String {
        let out = std::sync::Arc::new(Mutex::new(Vec::<u8>::new()));
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || Capture(writer.clone()))
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(out.lock().clone()).unwrap()
    }

    struct Capture(std::sync::Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn each_warning_is_logged_once() {
        let response = || {
            Response::builder()
                .header(
                    "Warning",
                    r#"299 - "apps/v1beta1 Thing is deprecated, test-only""#,
                )
                .body(())
                .unwrap()
        };
        let first = logged(|| drop(log(response())));
        assert!(first.contains(LOGGED_AS), "{first}");
        assert!(
            first.contains("apps/v1beta1 Thing is deprecated, test-only"),
            "{first}"
        );
        let again = logged(|| drop(log(response())));
        assert!(!again.contains(LOGGED_AS), "{again}");
    }
}
