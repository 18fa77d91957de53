//! Which addresses webhooks may reach.
//!
//! A webhook URL comes from a client, so without a check a subscription
//! could make the server call services on its own machine or network
//! (server-side request forgery). No internal address is reached —
//! loopback, private, link-local, shared, multicast, reserved, and IPv6
//! forms that embed an IPv4 address — unless a network of
//! [`ServerConfig::webhook_allowed_networks`](crate::ServerConfig)
//! contains it. The check runs when a subscription is made (on every
//! address its host resolves to), when each connection is opened (the
//! webhook client's resolver drops refused addresses, so a name that
//! resolves differently later is caught), and on every redirect.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

/// How long resolving a webhook's host may take when a subscription is made.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The addresses webhooks may reach.
#[derive(Clone, Debug)]
pub(super) struct AddressPolicy {
    allowed: Vec<IpNet>,
}

impl AddressPolicy {
    pub(super) fn new(allowed: Vec<IpNet>) -> Self {
        AddressPolicy { allowed }
    }

    /// Whether a connection to `ip` is allowed.
    pub(super) fn permits(&self, ip: IpAddr) -> bool {
        !is_internal(ip) || self.allowed.iter().any(|net| net.contains(&ip))
    }

    /// Checks a URL without resolving it: an http(s) URL whose host, when
    /// it is an IP address, is permitted. Redirects are checked this way;
    /// host names are checked when they are resolved.
    pub(super) fn check_literal(&self, url: &Url) -> Result<(), String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err("must be http or https".into());
        }
        let ip = match url.host() {
            None => return Err("has no host".into()),
            Some(Host::Domain(_)) => return Ok(()),
            Some(Host::Ipv4(ip)) => IpAddr::V4(ip),
            Some(Host::Ipv6(ip)) => IpAddr::V6(ip),
        };
        if self.permits(ip) {
            Ok(())
        } else {
            Err(format!("points to {ip}, an internal address"))
        }
    }

    /// Checks a URL a subscription names, resolving its host: every
    /// address it resolves to must be permitted.
    pub(super) async fn check(&self, url: &str) -> Result<Url, String> {
        let parsed = Url::parse(url).map_err(|_| "is not a URL".to_owned())?;
        self.check_literal(&parsed)?;
        if let Some(Host::Domain(domain)) = parsed.host() {
            let port = parsed.port_or_known_default().unwrap_or(80);
            let resolved: Vec<SocketAddr> =
                tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((domain, port)))
                    .await
                    .map_err(|_| format!("host `{domain}` did not resolve in time"))?
                    .map_err(|e| format!("host `{domain}` does not resolve: {e}"))?
                    .collect();
            if resolved.is_empty() {
                return Err(format!("host `{domain}` resolves to no address"));
            }
            if let Some(refused) = resolved.iter().find(|a| !self.permits(a.ip())) {
                return Err(format!(
                    "host `{domain}` resolves to {}, an internal address",
                    refused.ip()
                ));
            }
        }
        Ok(parsed)
    }
}

/// The webhook client's resolver: system DNS, minus refused addresses.
pub(super) struct GuardedResolver(pub(super) Arc<AddressPolicy>);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.0);
        Box::pin(async move {
            let host = name.as_str();
            let permitted: Vec<SocketAddr> = tokio::net::lookup_host((host, 0))
                .await?
                .filter(|a| policy.permits(a.ip()))
                .collect();
            if permitted.is_empty() {
                return Err(format!("`{host}` resolves to no permitted address").into());
            }
            let addrs: Addrs = Box::new(permitted.into_iter());
            Ok(addrs)
        })
    }
}

/// Addresses that are not on the public internet.
fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6),
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_unspecified()
        || a == 0 // "this network"
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || (a == 100 && (b & 0xc0) == 64) // shared address space (CGNAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || ip.is_documentation()
        || (a == 198 && (b & 0xfe) == 18) // benchmarking
        || ip.is_multicast()
        || a >= 240 // reserved and broadcast
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let [s0, s1, ..] = ip.segments();
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || ip.to_ipv4_mapped().is_some() // ::ffff:a.b.c.d
        || ip.segments()[..6] == [0; 6] // IPv4-compatible ::a.b.c.d
        || (s0 & 0xfe00) == 0xfc00 // unique local
        || (s0 & 0xffc0) == 0xfe80 // link-local
        || (s0 & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (s0 == 0x64 && s1 == 0xff9b) // NAT64, which embeds IPv4
        || s0 == 0x2002 // 6to4, which embeds IPv4
        || (s0 == 0x2001 && s1 == 0) // Teredo, which embeds IPv4
        || (s0 == 0x2001 && s1 == 0x0db8) // documentation
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_refused_unless_allowed() {
        let strict = AddressPolicy::new(Vec::new());
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:8.8.8.8",
            "fe80::1",
            "fd00::1",
            "64:ff9b::a00:1",
            "2002:a00:1::",
        ] {
            let ip: IpAddr = internal.parse().expect("address");
            assert!(!strict.permits(ip), "{internal}");
        }
        for public in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"] {
            let ip: IpAddr = public.parse().expect("address");
            assert!(strict.permits(ip), "{public}");
        }
        let loopback = AddressPolicy::new(vec!["127.0.0.0/8".parse().expect("net")]);
        assert!(loopback.permits("127.0.0.2".parse().expect("address")));
        assert!(!loopback.permits("::1".parse().expect("address")));
        assert!(!loopback.permits("10.0.0.1".parse().expect("address")));
    }

    #[test]
    fn urls_need_http_and_a_permitted_literal_host() {
        let strict = AddressPolicy::new(Vec::new());
        let check = |url: &str| strict.check_literal(&Url::parse(url).expect("url"));
        assert!(check("https://example.com/hook").is_ok());
        assert!(check("ftp://example.com/hook").is_err());
        assert!(check("http://[::ffff:10.0.0.1]/").is_err());
        assert!(check("http://127.1/").is_err(), "short IPv4 forms are IPv4");
    }
}
