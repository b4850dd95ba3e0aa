//! Where outgoing webhooks may go: never into the network masterpay runs in.
//!
//! An endpoint's URL is chosen by whoever administers a project; sent there
//! blindly, a webhook could reach the database, a cloud's metadata service
//! (169.254.169.254) or anything else only this host can reach (server-side
//! request forgery). So a destination is refused when its host is, or
//! resolves to, an address that is not globally reachable: loopback,
//! private, link-local, unique-local, carrier-grade NAT, unspecified,
//! broadcast, multicast, reserved or documentation ranges, in IPv4, IPv6 and
//! the IPv6 forms that embed an IPv4 address (mapped, compatible, NAT64,
//! 6to4). The setting `webhook_allow_networks` lists the networks allowed
//! nevertheless (a receiver on the operator's own network, the tests'
//! receivers on 127.0.0.1).
//!
//! The check runs when an endpoint is created or changed
//! ([`DestinationPolicy::check`], with a lookup) and again at every send.
//! A name that does not resolve when it is set is accepted (its DNS may come
//! later): the send refuses it if it then resolves where it may not go. A name checked at creation may
//! resolve elsewhere later (DNS rebinding), so the send resolves the name
//! once more through [`CheckedResolver`], the HTTP client's only resolver:
//! it hands the client only the addresses that pass, and the client
//! connects to one of those, with no lookup of its own. An IP literal is
//! never handed to a resolver (the client connects to it directly), so
//! [`DestinationPolicy::check_form`] checks it apart, at every send too. The URL parser reads the IPv4 forms
//! browsers accept (`http://2130706433/`, `http://0x7f.1/`,
//! `http://0177.0.0.1/`) as the address they name.

use std::{
    future::Future,
    io,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    pin::Pin,
    sync::{Arc, LazyLock},
};

use ipnet::IpNet;
use reqwest::{Url, dns};

use crate::config::WebhookSettings;

/// The networks refused unless allowed: none of them is globally reachable.
/// IPv6 addresses that embed an IPv4 address are judged by it (see
/// [`embedded_ipv4`]).
static REFUSED_NETWORKS: LazyLock<Vec<IpNet>> = LazyLock::new(|| {
    [
        // IPv4
        "0.0.0.0/8",       // "this network", unspecified
        "10.0.0.0/8",      // private
        "100.64.0.0/10",   // carrier-grade NAT
        "127.0.0.0/8",     // loopback
        "169.254.0.0/16",  // link-local (cloud metadata services)
        "172.16.0.0/12",   // private
        "192.0.0.0/24",    // IETF protocol assignments
        "192.0.2.0/24",    // documentation
        "192.88.99.0/24",  // 6to4 relay anycast
        "192.168.0.0/16",  // private
        "198.18.0.0/15",   // benchmarking
        "198.51.100.0/24", // documentation
        "203.0.113.0/24",  // documentation
        "224.0.0.0/4",     // multicast
        "240.0.0.0/4",     // reserved, and 255.255.255.255 (broadcast)
        // IPv6
        "::/128",        // unspecified
        "::1/128",       // loopback
        "100::/64",      // discard
        "2001:db8::/32", // documentation
        "fc00::/7",      // unique-local
        "fe80::/10",     // link-local
        "fec0::/10",     // site-local (deprecated)
        "ff00::/8",      // multicast
    ]
    .iter()
    .map(|net| net.parse().expect("a valid network"))
    .collect()
});

/// What the settings say about destinations.
#[derive(Debug, Clone, Default)]
pub struct DestinationPolicy {
    /// Networks allowed although [`REFUSED_NETWORKS`] lists them.
    pub allow: Vec<IpNet>,
    /// Whether only `https://` URLs are accepted.
    pub https_only: bool,
}

/// Why a destination is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the URL is not valid: {0}")]
    Malformed(String),
    #[error("the URL must start with https:// or http://")]
    Scheme,
    #[error("the URL must start with https:// (webhook_https_only)")]
    HttpsOnly,
    #[error("the URL must not carry a user name or password")]
    Credentials,
    /// The address, or every address the name resolves to, is refused.
    #[error("{0} is not a public address (webhook_allow_networks can allow it)")]
    Address(IpAddr),
}

/// What an endpoint's address is checked against when it is set: the
/// settings' policy, and the lookup that resolves its name.
#[derive(Debug, Clone, Default)]
pub struct Destinations {
    pub policy: DestinationPolicy,
    pub lookup: Resolver,
}

impl Destinations {
    /// The policy of `settings`, with the system's resolver.
    pub fn of(settings: &WebhookSettings) -> Destinations {
        Destinations {
            policy: DestinationPolicy::of(settings),
            lookup: Resolver::default(),
        }
    }
}

impl DestinationPolicy {
    /// The policy `settings` give.
    pub fn of(settings: &WebhookSettings) -> DestinationPolicy {
        DestinationPolicy {
            allow: settings.allow_networks.clone(),
            https_only: settings.https_only,
        }
    }

    /// Whether a connection to `ip` is allowed.
    pub fn allows(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.allow.iter().any(|net| net.contains(&ip))
            || (is_public(ip) && embedded_ipv4(ip).is_none_or(|v4| self.allows(IpAddr::V4(v4))))
    }

    /// `url` parsed, when its form is acceptable and, for an IP literal,
    /// its address allowed; a host name is returned unresolved (see
    /// [`DestinationPolicy::check`]).
    pub fn check_form(&self, url: &str) -> Result<Url, Refusal> {
        let parsed = Url::parse(url).map_err(|err| Refusal::Malformed(err.to_string()))?;
        match parsed.scheme() {
            "https" => {}
            "http" if self.https_only => return Err(Refusal::HttpsOnly),
            "http" => {}
            _ => return Err(Refusal::Scheme),
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(Refusal::Credentials);
        }
        match literal_address(&parsed) {
            Some(ip) if !self.allows(ip) => Err(Refusal::Address(ip)),
            _ => Ok(parsed),
        }
    }

    /// `url` checked as it is set on an endpoint: its form, and every
    /// address its host resolves to through `lookup` (one refused address
    /// refuses it: a send could pick it). A name that does not resolve
    /// passes; every send checks it again.
    pub async fn check(&self, url: &str, lookup: &dyn Lookup) -> Result<Url, Refusal> {
        let parsed = self.check_form(url)?;
        if literal_address(&parsed).is_none() {
            let name = parsed.host_str().unwrap_or_default();
            let addresses = lookup.lookup(name).await.unwrap_or_default();
            if let Some(refused) = addresses.iter().find(|ip| !self.allows(**ip)) {
                return Err(Refusal::Address(*refused));
            }
        }
        Ok(parsed)
    }
}

/// The address a URL's host is written as, when it is an IP literal (the
/// parser has already read every IPv4 spelling as dotted decimal); `None`
/// for a name. A URL without a host is refused by its parser for http(s).
fn literal_address(url: &Url) -> Option<IpAddr> {
    let host = url.host_str()?;
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// The IPv4 address an IPv4-mapped (`::ffff:a.b.c.d`) or IPv4-compatible
/// (`::a.b.c.d`) IPv6 address stands for, as that IPv4 address; any other
/// address as it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4() {
            // `to_ipv4` reads `::` and `::1` as 0.0.0.0 and 0.0.0.1, both
            // refused as 0.0.0.0/8 is; the same answer as theirs.
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        IpAddr::V4(_) => ip,
    }
}

/// The IPv4 address that a NAT64 (`64:ff9b::/96`) or 6to4 (`2002::/16`)
/// address leads to.
fn embedded_ipv4(ip: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = ip else { return None };
    let s = v6.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(v4(hi, lo)),
        [0x2002, hi, lo, ..] => Some(v4(hi, lo)),
        _ => None,
    }
}

/// Whether `ip` (canonical) is in none of the refused networks.
fn is_public(ip: IpAddr) -> bool {
    !REFUSED_NETWORKS.iter().any(|net| net.contains(&ip))
}

/// A name's addresses, as the system resolver (or a test's) gives them.
pub trait Lookup: Send + Sync {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;
}

/// The system's resolver (getaddrinfo, on a blocking thread).
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>> {
        Box::pin(async move {
            let found = tokio::net::lookup_host((host, 0)).await?;
            Ok(found.map(|address| address.ip()).collect())
        })
    }
}

/// The lookup a relay and the endpoint checks use: the system's, or one a
/// test injects.
#[derive(Clone)]
pub struct Resolver(pub Arc<dyn Lookup>);

impl Default for Resolver {
    fn default() -> Resolver {
        Resolver(Arc::new(SystemLookup))
    }
}

debug_as!(Resolver, "Resolver(..)");

/// The HTTP client's resolver: a name's addresses that `policy` allows,
/// and an error naming a refused one when none is.
pub struct CheckedResolver {
    pub policy: DestinationPolicy,
    pub lookup: Resolver,
}

/// The error [`CheckedResolver`] fails a connection with; the relay finds
/// it in the client's error to record the attempt as `refused_address`.
#[derive(Debug, thiserror::Error)]
#[error("{0} is not a public address")]
pub struct RefusedAddress(pub IpAddr);

impl dns::Resolve for CheckedResolver {
    fn resolve(&self, name: dns::Name) -> dns::Resolving {
        let policy = self.policy.clone();
        let lookup = Arc::clone(&self.lookup.0);
        Box::pin(async move {
            let found = lookup.lookup(name.as_str()).await?;
            let allowed: Vec<SocketAddr> = found
                .iter()
                .filter(|ip| policy.allows(**ip))
                .map(|ip| SocketAddr::new(*ip, 0))
                .collect();
            match (allowed.is_empty(), found.first()) {
                (false, _) => Ok(Box::new(allowed.into_iter()) as dns::Addrs),
                (true, Some(refused)) => Err(Box::new(RefusedAddress(*refused)) as _),
                (true, None) => Err(Box::new(io::Error::new(
                    io::ErrorKind::NotFound,
                    "the host name has no address",
                )) as _),
            }
        })
    }
}

/// Whether the error chain of `err` holds a [`RefusedAddress`].
pub fn is_refused_address(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(err) = next {
        if err.is::<RefusedAddress>() {
            return true;
        }
        next = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6(text: &str) -> IpAddr {
        IpAddr::V6(text.parse::<std::net::Ipv6Addr>().unwrap())
    }

    fn refused(policy: &DestinationPolicy, url: &str) -> Refusal {
        policy.check_form(url).unwrap_err()
    }

    #[test]
    fn addresses_that_are_not_public_are_refused() {
        let policy = DestinationPolicy::default();
        for ip in [
            "127.0.0.1",
            "127.255.255.254",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "192.0.2.10",
            "198.18.0.1",
        ] {
            assert!(!policy.allows(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "::",
            "::1",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "fec0::1",
            "2001:db8::1",
            // IPv4-mapped and IPv4-compatible forms of refused addresses
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "::10.0.0.1",
            // NAT64 and 6to4 of refused addresses
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "2002:c0a8:101::1",
        ] {
            assert!(!policy.allows(v6(ip)), "{ip}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        let policy = DestinationPolicy::default();
        for ip in [
            "93.184.215.14",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
        ] {
            assert!(policy.allows(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert!(policy.allows(v6(ip)), "{ip}");
        }
    }

    #[test]
    fn allowed_networks_pass_in_every_form() {
        let policy = DestinationPolicy {
            allow: vec!["127.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()],
            https_only: false,
        };
        assert!(policy.allows("127.0.0.1".parse().unwrap()));
        assert!(policy.allows(v6("::ffff:127.0.0.1")));
        assert!(policy.allows(v6("fd00::5")));
        assert!(!policy.allows("10.0.0.1".parse().unwrap()));
        assert!(!policy.allows(v6("::1")));
        assert!(policy.check_form("http://127.0.0.1:9000/hook").is_ok());
    }

    #[test]
    fn ip_literals_in_every_spelling_are_checked() {
        let policy = DestinationPolicy::default();
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0x7f.1/",
            "http://0177.0.0.1/",
            "http://127.1/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "https://169.254.169.254/latest/meta-data/",
            "http://0/",
        ] {
            assert!(
                matches!(refused(&policy, url), Refusal::Address(_)),
                "{url}"
            );
        }
        assert!(policy.check_form("https://93.184.215.14/hook").is_ok());
        assert!(policy.check_form("https://hooks.example.com/hook").is_ok());
    }

    #[test]
    fn schemes_credentials_and_https_only() {
        let policy = DestinationPolicy::default();
        assert_eq!(
            refused(&policy, "ftp://hooks.example.com/"),
            Refusal::Scheme
        );
        assert_eq!(refused(&policy, "file:///etc/passwd"), Refusal::Scheme);
        assert_eq!(
            refused(&policy, "https://user:pass@hooks.example.com/"),
            Refusal::Credentials
        );
        assert!(matches!(
            refused(&policy, "not a url"),
            Refusal::Malformed(_)
        ));
        let https_only = DestinationPolicy {
            https_only: true,
            ..Default::default()
        };
        assert_eq!(
            refused(&https_only, "http://hooks.example.com/"),
            Refusal::HttpsOnly
        );
        assert!(https_only.check_form("https://hooks.example.com/").is_ok());
    }

    struct Fixed(Vec<IpAddr>);

    impl Lookup for Fixed {
        fn lookup<'a>(
            &'a self,
            _: &'a str,
        ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>> {
            Box::pin(std::future::ready(Ok(self.0.clone())))
        }
    }

    #[tokio::test]
    async fn a_name_is_refused_when_any_of_its_addresses_is_and_passes_unresolved() {
        let policy = DestinationPolicy::default();
        let public: IpAddr = "93.184.215.14".parse().unwrap();
        let metadata: IpAddr = "169.254.169.254".parse().unwrap();
        let url = "https://hooks.example.com/";
        assert!(policy.check(url, &Fixed(vec![public])).await.is_ok());
        assert_eq!(
            policy.check(url, &Fixed(vec![public, metadata])).await,
            Err(Refusal::Address(metadata))
        );
        assert!(policy.check(url, &Fixed(vec![])).await.is_ok());
    }

    #[tokio::test]
    async fn the_client_resolver_hands_over_only_allowed_addresses() {
        use reqwest::dns::Resolve;
        let public: IpAddr = "93.184.215.14".parse().unwrap();
        let resolver = |found: Vec<IpAddr>| CheckedResolver {
            policy: DestinationPolicy::default(),
            lookup: Resolver(Arc::new(Fixed(found))),
        };
        let name = || "hooks.example.com".parse::<dns::Name>().unwrap();
        let mixed = resolver(vec!["10.0.0.1".parse().unwrap(), public]);
        let addresses: Vec<SocketAddr> = mixed.resolve(name()).await.unwrap().collect();
        assert_eq!(addresses, [SocketAddr::new(public, 0)]);
        let private = resolver(vec!["10.0.0.1".parse().unwrap()]);
        let err = private.resolve(name()).await.err().unwrap();
        assert!(is_refused_address(&*err));
    }
}
