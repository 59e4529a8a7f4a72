//! The webhook's certificates when the operator provisions them itself, as Gatekeeper's
//! cert-controller does: a CA of its own (ten years) and a serving certificate it signs for
//! the webhook Service's names (one year), kept in one Secret that every replica reads and
//! any may renew; the CA goes into the CRD's `caBundle`. What to do with the Secret found is
//! decided here, without I/O; `keeper` reads and writes it.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// The Secret's keys: `kubernetes.io/tls`'s two, and the CA's.
pub const CA_CRT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
/// The CA a new one replaced, trusted until [`PREVIOUS_UNTIL`].
pub const CA_PREVIOUS: &str = "ca-previous.crt";
pub const TLS_CRT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";

/// Annotations the operator keeps on the Secret: when each certificate expires, and the names
/// the serving one covers. A Secret without them was not made by the operator, and is made
/// again.
pub const CA_NOT_AFTER: &str = "podset-operator.example.com/ca-not-after";
pub const TLS_NOT_AFTER: &str = "podset-operator.example.com/tls-not-after";
pub const TLS_HOSTS: &str = "podset-operator.example.com/tls-hosts";
pub const PREVIOUS_UNTIL: &str = "podset-operator.example.com/previous-ca-until";

/// How long a replaced CA stays in the `caBundle`: each replica serves the new certificate
/// within a second of the Secret's change (it watches it), or at its next look.
pub const PREVIOUS_TRUSTED: SignedDuration = SignedDuration::from_mins(10);

const CA_LIFETIME: SignedDuration = SignedDuration::from_hours(24 * 3650);
const TLS_LIFETIME: SignedDuration = SignedDuration::from_hours(24 * 365);
/// A serving certificate is renewed this long before it expires, and the CA too (with it, the
/// CRD's `caBundle`): every replica reads the Secret again far more often than that.
pub const RENEW_BEFORE: SignedDuration = SignedDuration::from_hours(24 * 30);
const CA_NAME: &str = "podset-operator-webhook-ca";

/// The Secret's contents, as read or to write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    pub data: BTreeMap<String, Vec<u8>>,
    pub annotations: BTreeMap<String, String>,
}

impl Stored {
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.data
            .get(key)
            .map(Vec::as_slice)
            .filter(|v| !v.is_empty())
    }

    fn until(&self, annotation: &str) -> Option<Timestamp> {
        self.annotations.get(annotation)?.parse().ok()
    }

    /// The serving certificate and key, to serve; the CA, for the `caBundle`.
    pub fn serving(&self) -> Option<(&[u8], &[u8], &[u8])> {
        Some((self.get(TLS_CRT)?, self.get(TLS_KEY)?, self.get(CA_CRT)?))
    }
}

/// What a replica does with the Secret it read.
#[derive(Debug, PartialEq, Eq)]
pub enum Need {
    /// Serve it as it is.
    Serve,
    /// Write this in its place (a new serving certificate, and a new CA if the old one will
    /// not do), over the version read.
    Write(Stored),
}

/// What `found` (the Secret's contents, `None` if there is none) needs for `hosts` at `now`:
/// nothing while its CA and serving certificate are the operator's, cover `hosts` and are
/// not about to expire; else a new serving certificate, from a new CA if the one found will
/// not do. A CA replaced stays trusted beside the new one for [`PREVIOUS_TRUSTED`] (the
/// `caBundle` holds both), while every replica takes up the new certificate.
pub fn need(
    found: Option<&Stored>,
    hosts: &[String],
    now: Timestamp,
) -> Result<Need, rcgen::Error> {
    let found = found.cloned().unwrap_or_default();
    let fresh = |annotation| {
        found
            .until(annotation)
            .is_some_and(|until| until - RENEW_BEFORE > now)
    };
    let ca = fresh(CA_NOT_AFTER)
        .then(|| {
            let key = key_pair(found.get(CA_KEY)?)?;
            Some(Authority {
                crt: found.get(CA_CRT)?.to_vec(),
                key,
            })
        })
        .flatten();
    let covers = found.annotations.get(TLS_HOSTS) == Some(&hosts.join(","));
    if ca.is_some() && covers && fresh(TLS_NOT_AFTER) && found.serving().is_some() {
        return Ok(Need::Serve);
    }
    let (ca, mut annotations) = match ca {
        Some(ca) => (ca, found.annotations.clone()),
        None => authority(now)?,
    };
    let mut data = BTreeMap::new();
    if let Some(previous) = found.get(CA_CRT).filter(|old| *old != ca.crt) {
        data.insert(CA_PREVIOUS.to_string(), previous.to_vec());
        annotations.insert(PREVIOUS_UNTIL.into(), (now + PREVIOUS_TRUSTED).to_string());
    }
    let mut stored = serving(ca, annotations, hosts, now)?;
    stored.data.extend(data);
    Ok(Need::Write(stored))
}

/// The CAs the API server is to trust (the CRD's `caBundle`): the Secret's, and the one it
/// replaced while that is still trusted.
pub fn bundle(stored: &Stored, now: Timestamp) -> Vec<u8> {
    let mut bundle = stored.get(CA_CRT).unwrap_or_default().to_vec();
    if stored
        .until(PREVIOUS_UNTIL)
        .is_some_and(|until| until > now)
    {
        bundle.extend(stored.get(CA_PREVIOUS).unwrap_or_default());
    }
    bundle
}

fn key_pair(pem: &[u8]) -> Option<KeyPair> {
    KeyPair::from_pem(str::from_utf8(pem).ok()?).ok()
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, CA_NAME);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

/// A CA: its certificate (PEM) and key.
struct Authority {
    crt: Vec<u8>,
    key: KeyPair,
}

/// A new CA, and the annotation saying when it expires.
fn authority(now: Timestamp) -> Result<(Authority, BTreeMap<String, String>), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = ca_params();
    let not_after = now + CA_LIFETIME;
    (params.not_before, params.not_after) =
        (time(now - SignedDuration::from_hours(1)), time(not_after));
    let crt = params.self_signed(&key)?.pem().into_bytes();
    let annotations = BTreeMap::from([(CA_NOT_AFTER.to_string(), not_after.to_string())]);
    Ok((Authority { crt, key }, annotations))
}

/// A serving certificate for `hosts` signed by the CA, with everything the Secret holds.
fn serving(
    ca: Authority,
    mut annotations: BTreeMap<String, String>,
    hosts: &[String],
    now: Timestamp,
) -> Result<Stored, rcgen::Error> {
    let ca_params = ca_params();
    let issuer = Issuer::from_params(&ca_params, &ca.key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(hosts.to_vec())?;
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(
        DnType::CommonName,
        hosts.first().cloned().unwrap_or_default(),
    );
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let not_after = now + TLS_LIFETIME;
    (params.not_before, params.not_after) =
        (time(now - SignedDuration::from_hours(1)), time(not_after));
    let cert = params.signed_by(&key, &issuer)?;
    annotations.insert(TLS_NOT_AFTER.into(), not_after.to_string());
    annotations.insert(TLS_HOSTS.into(), hosts.join(","));
    let data = BTreeMap::from([
        (CA_CRT.to_string(), ca.crt.clone()),
        (CA_KEY.to_string(), ca.key.serialize_pem().into_bytes()),
        (TLS_CRT.to_string(), cert.pem().into_bytes()),
        (TLS_KEY.to_string(), key.serialize_pem().into_bytes()),
    ]);
    Ok(Stored { data, annotations })
}

fn time(t: Timestamp) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(t.as_second()).expect("within time's range")
}

#[cfg(test)]
mod tests;
