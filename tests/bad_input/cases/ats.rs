//! The malformed Ats: their schedule, command, names, and a body that is not JSON.

use podset_operator::api::at::{LATEST_SCHEDULE, SCHEDULE_MESSAGE};
use serde_json::json;

use super::{Case, Expect, Kind, api_version, at, case, long, when};

pub fn cases() -> Vec<Case> {
    use Expect::*;
    let mut cases = vec![
        at(
            "impossible date",
            1,
            when("2019-02-30T10:00:00Z"),
            Refused(422, SCHEDULE_MESSAGE),
        ),
        at(
            "hour 25",
            2,
            when("2019-04-12T25:00:00Z"),
            Refused(422, SCHEDULE_MESSAGE),
        ),
        at(
            "February 29th, not a leap year",
            3,
            when("2019-02-29T10:00:00Z"),
            Refused(422, SCHEDULE_MESSAGE),
        ),
        at(
            "February 29th, leap year",
            4,
            when("2020-02-29T10:00:00Z"),
            Running,
        ),
        at(
            "a space for the T",
            5,
            when("2019-04-12 10:12:00Z"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "a timezone offset",
            6,
            when("2019-04-12T10:12:00+02:00"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "fractional seconds",
            7,
            when("2019-04-12T10:12:00.5Z"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "a cron expression",
            8,
            when("*/5 * * * *"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "leading space",
            9,
            when(" 2019-04-12T10:12:00Z"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "empty schedule",
            10,
            when(""),
            Refused(422, "spec.schedule"),
        ),
        at(
            "schedule a number",
            11,
            json!({"schedule": 1555063920, "command": "echo"}),
            Refused(422, "spec.schedule"),
        ),
        at(
            "no schedule",
            12,
            json!({"command": "echo hi"}),
            Refused(422, "spec.schedule"),
        ),
        at(
            "no command",
            13,
            json!({"schedule": "2019-04-12T10:12:00Z"}),
            Refused(422, "spec.command"),
        ),
        at(
            "empty command",
            14,
            json!({"schedule": "2019-04-12T10:12:00Z", "command": ""}),
            Refused(422, "spec.command"),
        ),
        at(
            "command a list",
            15,
            json!({"schedule": "2019-04-12T10:12:00Z", "command": ["echo", "hi"]}),
            Refused(422, "spec.command"),
        ),
        at(
            "command a number",
            16,
            json!({"schedule": "2019-04-12T10:12:00Z", "command": 42}),
            Refused(422, "spec.command"),
        ),
        case(
            "spec null",
            Kind::At,
            "bad-at-17",
            json!({"spec": null}),
            Refused(422, "spec"),
        ),
        at(
            "1 MiB command",
            18,
            json!({"schedule": "2019-04-12T10:12:00Z",
            "command": format!("echo {}", "y".repeat(1 << 20))}),
            Running,
        ),
        at(
            "unicode command",
            19,
            json!({"schedule": "2019-04-12T10:12:00Z",
            "command": "echo 'héllo wörld ✓ 日本語 🚀' \u{202e}"}),
            Running,
        ),
        at(
            "shell metacharacters",
            20,
            json!({"schedule": "2019-04-12T10:12:00Z",
            "command": "echo \"$(id)\" `date`; exit 3 && rm -rf / ; #"}),
            Running,
        ),
        at("year 0000", 21, when("0000-01-01T00:00:00Z"), Running),
        // Past the operator's clock: admitted before the search of issue 31 found it.
        at(
            "year 9999, last day",
            22,
            when("9999-12-31T23:59:59Z"),
            Refused(422, SCHEDULE_MESSAGE),
        ),
        at(
            "the latest the operator reads",
            40,
            when(LATEST_SCHEDULE),
            Pending,
        ),
        Case {
            pruned: &["/spec/retries"],
            ..at(
                "unknown spec field",
                23,
                json!({"schedule": "2019-04-12T10:12:00Z", "command": "echo", "retries": 3}),
                Running,
            )
        },
        case(
            "status set at create",
            Kind::At,
            "bad-at-24",
            json!({"spec": when("2019-04-12T10:12:00Z"),
                "status": {"phase": "DONE", "succeeded": true}}),
            Running,
        ),
        case(
            "name of 253 chars",
            Kind::At,
            &long(253).replace('a', "b"),
            json!({"spec": when("2019-04-12T10:12:00Z")}),
            Refused(422, "more than 63 bytes"),
        ),
        case(
            "name of 100 chars",
            Kind::At,
            &long(100).replace('a', "c"),
            json!({"spec": when("2019-04-12T10:12:00Z")}),
            Refused(422, "more than 63 bytes"),
        ),
        case(
            "name of 254 chars",
            Kind::At,
            &long(254).replace('a', "b"),
            json!({"spec": when("2019-04-12T10:12:00Z")}),
            Refused(422, "must be no more than 253 characters"),
        ),
        case(
            "unicode name",
            Kind::At,
            "ät",
            json!({"spec": when("2019-04-12T10:12:00Z")}),
            Refused(422, "RFC 1123"),
        ),
    ];
    cases.push(Case {
        body: format!(
            r#"{{"apiVersion": "{}", "kind": "At", "metadata": {{"name": "bad-at-99"}}, "spec": {{"#,
            api_version(Kind::At)
        ),
        ..case("truncated JSON", Kind::At, "bad-at-99", json!({}), Refused(400, ""))
    });
    cases
}
