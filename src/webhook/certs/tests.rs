use super::*;

fn hosts() -> Vec<String> {
    vec!["hook.ops.svc".into(), "hook.ops.svc.cluster.local".into()]
}

fn now() -> Timestamp {
    "2026-12-07T12:00:00Z".parse().unwrap()
}

fn written(found: Option<&Stored>, hosts: &[String], at: Timestamp) -> Stored {
    match need(found, hosts, at).unwrap() {
        Need::Write(stored) => stored,
        Need::Serve => panic!("expected a write"),
    }
}

#[test]
fn none_found_makes_a_ca_and_a_serving_certificate_for_the_services_names() {
    let stored = written(None, &hosts(), now());
    for key in [CA_CRT, CA_KEY, TLS_CRT, TLS_KEY] {
        assert!(stored.get(key).is_some(), "{key}");
    }
    assert_eq!(stored.annotations[TLS_HOSTS], hosts().join(","));
    assert_eq!(bundle(&stored, now()), stored.get(CA_CRT).unwrap());
    assert_eq!(need(Some(&stored), &hosts(), now()).unwrap(), Need::Serve);
}

#[test]
fn a_serving_certificate_is_renewed_before_it_expires_or_when_the_names_change_under_the_same_ca() {
    let stored = written(None, &hosts(), now());
    let later = now() + TLS_LIFETIME - RENEW_BEFORE + SignedDuration::from_secs(1);
    assert_eq!(
        need(
            Some(&stored),
            &hosts(),
            later - SignedDuration::from_secs(2)
        )
        .unwrap(),
        Need::Serve
    );
    let renewed = written(Some(&stored), &hosts(), later);
    assert_eq!(renewed.get(CA_CRT), stored.get(CA_CRT), "the same CA");
    assert_ne!(renewed.get(TLS_CRT), stored.get(TLS_CRT));
    assert!(renewed.get(CA_PREVIOUS).is_none());

    let moved = vec!["other.ops.svc".to_string()];
    let renamed = written(Some(&stored), &moved, now());
    assert_eq!(renamed.get(CA_CRT), stored.get(CA_CRT));
    assert_eq!(renamed.annotations[TLS_HOSTS], "other.ops.svc");
}

#[test]
fn a_ca_replaced_stays_trusted_for_a_while_beside_the_new_one() {
    let stored = written(None, &hosts(), now());
    let late = now() + CA_LIFETIME - RENEW_BEFORE + SignedDuration::from_secs(1);
    let replaced = written(Some(&stored), &hosts(), late);
    assert_ne!(replaced.get(CA_CRT), stored.get(CA_CRT));
    assert_eq!(replaced.get(CA_PREVIOUS), stored.get(CA_CRT));
    let both = [replaced.get(CA_CRT).unwrap(), stored.get(CA_CRT).unwrap()].concat();
    assert_eq!(bundle(&replaced, late), both);
    assert_eq!(
        bundle(&replaced, late + PREVIOUS_TRUSTED),
        replaced.get(CA_CRT).unwrap(),
        "the old one dropped"
    );
}

#[test]
fn a_secret_the_operator_did_not_make_is_made_again() {
    let mut foreign = written(None, &hosts(), now());
    foreign.annotations.clear();
    let made = written(Some(&foreign), &hosts(), now());
    assert_ne!(made.get(CA_CRT), foreign.get(CA_CRT));
    let mut broken = written(None, &hosts(), now());
    broken.data.insert(CA_KEY.into(), b"not a key".to_vec());
    let remade = written(Some(&broken), &hosts(), now());
    assert_ne!(remade.get(CA_CRT), broken.get(CA_CRT));
}
