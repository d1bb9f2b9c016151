//! Who is calling and what they may do: data-plane API keys ("virtual keys") and per-client
//! limits — allowed models, requests in progress, requests and tokens per minute. Over a limit,
//! a request is answered 429 with `Retry-After` before it takes any place.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use http::StatusCode;
use serde::Serialize;
use sha2::{Digest, Sha256};

use horos_server_control::Collections;
use horos_server_control::settings::changed_names;

use crate::error::{ApiError, InvalidConfig};
use crate::tenancy::auth::{bearer_token, same};
pub use crate::tenancy::caller::Caller;
pub use crate::tenancy::grants::{Cooldown, Grants, Limits, VirtualKey};

/// Callers whose limit windows are kept in memory; a new caller beyond it takes the place of
/// the client (never a key) whose window was touched longest ago and holds nothing in flight.
const MAX_WINDOWS: usize = 10_000;

/// Drops the window of the client without a key that was touched longest ago and has nothing in
/// flight (keys are a configured, finite set and keep theirs). Its caller starts afresh when it
/// comes back, as a caller that rotates its `x_client_id` would anyway.
fn evict_idlest(state: &mut HashMap<Caller, Window>) {
    let idlest = state
        .iter()
        .filter(|(c, w)| !matches!(c, Caller::Key(_)) && w.in_flight == 0)
        .min_by_key(|(_, w)| w.at)
        .map(|(c, _)| c.clone());
    if let Some(c) = idlest {
        state.remove(&c);
    }
}

/// One key, resolved.
#[derive(PartialEq)]
struct Key {
    name: String,
    sha256: [u8; 32],
    limits: Limits,
    grants: Grants,
    collections: Collections,
}

/// Rate and concurrency state of one caller.
struct Window {
    in_flight: usize,
    requests: f64,
    tokens: f64,
    at: Instant,
    /// Admission times within the cooldown's window (at most its `requests`).
    recent: VecDeque<Instant>,
    /// In a cooldown until then.
    cool_until: Option<Instant>,
}

/// What a caller's admission ([`Gatekeeper::admit_as`]) checks and counts. A synchronous request
/// is a request sent and its work run at once; an async job splits the two: its submission is
/// the request, its run the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charge {
    /// A synchronous request: checked against every limit, counted in the caller's requests per
    /// minute and its cooldown's window, a place held under its concurrency until it ends.
    Request,
    /// An async job's submission: checked against the caller's cooldown, requests and tokens
    /// per minute and counted as a request, but holding no place under its concurrency (nothing
    /// runs yet: a caller may queue jobs while one of its calls runs).
    Submission,
    /// An async job's run: checked against the caller's cooldown, concurrency and tokens per
    /// minute as a request is, its place held while it runs, but counted as no second request
    /// (its submission was).
    JobRun,
}

impl Charge {
    /// Whether it is a request the caller sent (its rate and cooldown window count it).
    const fn is_request(self) -> bool {
        matches!(self, Charge::Request | Charge::Submission)
    }

    /// Whether it runs work (it holds a place under the caller's concurrency).
    const fn runs(self) -> bool {
        matches!(self, Charge::Request | Charge::JobRun)
    }
}

/// The error code of a request refused during its caller's cooldown.
pub const COOLDOWN_CODE: &str = "client_cooldown";

/// The keys and limits of a coordinator, and each caller's state. The keys and limits (its
/// [`GatePolicy`]) can be replaced while it serves ([`Gatekeeper::replace`]); each caller's
/// state (requests in progress, rates, cooldowns) outlives a replacement.
pub struct Gatekeeper {
    policy: RwLock<Arc<GatePolicy>>,
    state: Mutex<HashMap<Caller, Window>>,
}

/// The keys (their secrets resolved) and limits a [`Gatekeeper`] applies, checked whole.
#[derive(PartialEq)]
pub struct GatePolicy {
    keys: Vec<Key>,
    allow_anonymous: bool,
    anonymous_collections: Collections,
    clients: BTreeMap<String, Limits>,
}

impl std::fmt::Debug for GatePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys by name only: never their digests.
        f.debug_struct("GatePolicy")
            .field(
                "keys",
                &self.keys.iter().map(|k| &k.name).collect::<Vec<_>>(),
            )
            .field("allow_anonymous", &self.allow_anonymous)
            .field("anonymous_collections", &self.anonymous_collections)
            .field("clients", &self.clients.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl std::fmt::Debug for Gatekeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gatekeeper")
            .field("policy", &*self.policy())
            .finish_non_exhaustive()
    }
}

/// What a reload changed in the keys and limits, by name (never a key's secret).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GateChanges {
    /// Keys that are new.
    pub keys_added: Vec<String>,
    /// Keys that are gone: their callers are refused from now on.
    pub keys_removed: Vec<String>,
    /// Keys whose secret or limits changed.
    pub keys_changed: Vec<String>,
    /// Client ids (`x_client_id`, `"*"`) whose limits were added, changed or removed.
    pub clients_changed: Vec<String>,
    /// Whether `allow_anonymous` changed.
    pub allow_anonymous_changed: bool,
    /// Whether `anonymous_collections` changed.
    pub anonymous_collections_changed: bool,
}

impl GateChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self == &GateChanges::default()
    }
}

impl GatePolicy {
    fn keys_by_name(&self) -> BTreeMap<String, &Key> {
        self.keys.iter().map(|k| (k.name.clone(), k)).collect()
    }

    /// What changes from `self` to `new`.
    fn changes_to(&self, new: &GatePolicy) -> GateChanges {
        let (old_keys, new_keys) = (self.keys_by_name(), new.keys_by_name());
        let keys = changed_names(&old_keys, &new_keys);
        let (mut added, mut removed, mut changed) = (Vec::new(), Vec::new(), Vec::new());
        for name in keys {
            match (old_keys.contains_key(&name), new_keys.contains_key(&name)) {
                (false, _) => added.push(name),
                (_, false) => removed.push(name),
                _ => changed.push(name),
            }
        }
        GateChanges {
            keys_added: added,
            keys_removed: removed,
            keys_changed: changed,
            clients_changed: changed_names(&self.clients, &new.clients),
            allow_anonymous_changed: self.allow_anonymous != new.allow_anonymous,
            anonymous_collections_changed: self.anonymous_collections != new.anonymous_collections,
        }
    }
}

/// A place taken under a caller's concurrency limit, given back when dropped.
pub struct Admitted {
    gate: Arc<Gatekeeper>,
    caller: Caller,
    counted: bool,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if self.counted
            && let Some(w) = self.gate.lock().get_mut(&self.caller)
        {
            w.in_flight = w.in_flight.saturating_sub(1);
        }
    }
}

/// A list of collection names as read from `key` (`"*"`: every collection).
fn collections(key: &str, names: &[String]) -> Result<Collections, InvalidConfig> {
    Collections::from_names(names).map_err(|e| InvalidConfig {
        key: key.to_owned(),
        value: e.name,
        expected: "collection names (1 to 64 bytes of letters, digits, `.`, `_`, `-`) or \"*\"",
    })
}

fn sha256(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn too_many(caller: &Caller, what: &str, retry_after_s: u64) -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_error",
        format!(
            "{} is over its {what} limit; retry in {retry_after_s} s",
            caller.label()
        ),
    )
    .code("rate_limit_exceeded")
    .retry_after(retry_after_s.max(1))
}

/// The 429 of a request during its caller's cooldown (`left` of it).
fn cooling(caller: &Caller, left: std::time::Duration) -> ApiError {
    let s = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_error",
        format!(
            "{} sent more requests than its pattern allows and is cooling down; retry in {s} s",
            caller.label()
        ),
    )
    .code(COOLDOWN_CODE)
    .retry_after(s.max(1))
}

impl Gatekeeper {
    /// A gate applying `policy` (see [`GatePolicy::new`]), no caller seen yet.
    pub fn new(policy: GatePolicy) -> Self {
        Self {
            policy: RwLock::new(Arc::new(policy)),
            state: Mutex::new(HashMap::new()),
        }
    }

    /// The policy it applies now.
    fn policy(&self) -> Arc<GatePolicy> {
        Arc::clone(&self.policy.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Applies `policy` to the requests admitted from now on, and says what changed. Requests
    /// in progress keep their places; the state of a removed key's caller is forgotten once
    /// nothing of it runs.
    pub fn replace(&self, policy: GatePolicy) -> GateChanges {
        let mut current = self.policy.write().unwrap_or_else(|e| e.into_inner());
        let changes = current.changes_to(&policy);
        *current = Arc::new(policy);
        drop(current);
        self.lock().retain(|caller, w| match caller {
            Caller::Key(name) => w.in_flight > 0 || !changes.keys_removed.contains(name),
            _ => true,
        });
        changes
    }
}

impl GatePolicy {
    /// The keys (their secrets read through `env`), whether callers without a key are let in,
    /// the document collections they read, and the limits of callers without a key by
    /// `x_client_id` (`"*"`: every other client), checked and resolved: a key whose variable is
    /// unset, a malformed digest, a zero limit or a bad collection name is refused, naming its
    /// key.
    pub fn new(
        keys: &BTreeMap<String, VirtualKey>,
        allow_anonymous: bool,
        anonymous_collections: &[String],
        clients: &BTreeMap<String, Limits>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, InvalidConfig> {
        let mut resolved = Vec::new();
        for (name, k) in keys {
            let at = |what: &str| format!("keys.{name}.{what}");
            let sha = match (&k.key_env, &k.key_sha256) {
                (Some(var), None) => {
                    let key =
                        env(var)
                            .filter(|v| !v.trim().is_empty())
                            .ok_or_else(|| InvalidConfig {
                                key: at("key_env"),
                                value: var.clone(),
                                expected: "a set, non-empty environment variable",
                            })?;
                    sha256(key.trim())
                }
                (None, Some(hex)) => parse_hex(hex).ok_or_else(|| InvalidConfig {
                    key: at("key_sha256"),
                    value: hex.clone(),
                    expected: "64 hex digits (the key's SHA-256)",
                })?,
                _ => {
                    return Err(InvalidConfig {
                        key: format!("keys.{name}"),
                        value: String::new(),
                        expected: "exactly one of key_env and key_sha256",
                    });
                }
            };
            let limits = k.limits();
            limits.validate(&format!("keys.{name}"))?;
            let collections = match &k.collections {
                None => Collections::default_only(),
                Some(names) => collections(&at("collections"), names)?,
            };
            resolved.push(Key {
                name: name.clone(),
                sha256: sha,
                limits,
                grants: Grants {
                    top_priority: k.top_priority,
                    may_unload: k.may_unload,
                },
                collections,
            });
        }
        for (client, l) in clients {
            l.validate(&format!("clients.{client}"))?;
        }
        Ok(Self {
            keys: resolved,
            allow_anonymous: allow_anonymous || keys.is_empty(),
            anonymous_collections: collections("anonymous_collections", anonymous_collections)?,
            clients: clients.clone(),
        })
    }

    /// The document collections `caller` reads: every one where no key is configured (one
    /// scope, as for everything else); a key's own (`"default"` where it names none; none for a
    /// key removed since the caller was identified); `anonymous_collections` for callers
    /// without a key.
    fn collections_of(&self, caller: &Caller) -> Collections {
        if self.keys.is_empty() {
            return Collections::All;
        }
        match caller {
            Caller::Key(name) => self
                .keys
                .iter()
                .find(|k| &k.name == name)
                .map_or(Collections::Only(Vec::new()), |k| k.collections.clone()),
            Caller::Client(_) | Caller::Anonymous => self.anonymous_collections.clone(),
        }
    }

    /// What `caller` may ask for (see [`Grants`]); `None` where no key is configured: one
    /// scope, every caller trusted as the operator is.
    fn grants_of(&self, caller: &Caller) -> Option<Grants> {
        if self.keys.is_empty() {
            return None;
        }
        Some(match caller {
            Caller::Key(name) => self
                .keys
                .iter()
                .find(|k| &k.name == name)
                .map(|k| k.grants)
                .unwrap_or_default(),
            Caller::Client(_) | Caller::Anonymous => Grants::default(),
        })
    }

    /// The limits of `caller`, if any.
    fn limits_of(&self, caller: &Caller) -> Option<&Limits> {
        let l = match caller {
            Caller::Key(name) => self
                .keys
                .iter()
                .find(|k| &k.name == name)
                .map(|k| &k.limits),
            Caller::Client(id) => self.clients.get(id).or_else(|| self.clients.get("*")),
            Caller::Anonymous => self.clients.get("*"),
        };
        l.filter(|l| !l.is_unlimited())
    }
}

impl Gatekeeper {
    fn lock(&self) -> MutexGuard<'_, HashMap<Caller, Window>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether keys are required (the policy names at least one).
    pub fn has_keys(&self) -> bool {
        !self.policy().keys.is_empty()
    }

    /// Whether nothing is configured (every request passes without a look).
    pub fn is_open(&self) -> bool {
        let p = self.policy();
        p.keys.is_empty() && p.clients.values().all(Limits::is_unlimited)
    }

    /// Who calls: the key of `authorization` (`Bearer KEY`), else the client id. A key that
    /// matches none is a 401; no key where keys are required is a 401.
    pub fn identify(
        &self,
        authorization: Option<&str>,
        client_id: Option<&str>,
    ) -> Result<Caller, ApiError> {
        let policy = self.policy();
        let token = authorization.and_then(bearer_token).map(str::trim);
        if !policy.keys.is_empty()
            && let Some(token) = token.filter(|t| !t.is_empty())
        {
            let digest = sha256(token);
            // Every key compared, in constant time each: no early exit on a match.
            let mut found = None;
            for k in &policy.keys {
                if same(&k.sha256, &digest) {
                    found = Some(k.name.clone());
                }
            }
            return found.map(Caller::Key).ok_or_else(|| {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "invalid_request_error",
                    "invalid API key",
                )
                .code("invalid_api_key")
            });
        }
        if !policy.allow_anonymous {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "an API key is required (Authorization: Bearer KEY)",
            )
            .code("missing_api_key"));
        }
        Ok(client_id.map_or(Caller::Anonymous, |c| Caller::Client(c.to_owned())))
    }

    /// What `caller` may ask of the scheduler (see [`Grants`]); `None` where no key is
    /// configured (one scope: nothing is bounded).
    pub fn grants(&self, caller: &Caller) -> Option<Grants> {
        self.policy().grants_of(caller)
    }

    /// The document collections `caller` may search and be answered from: every one where no
    /// key is configured; a key's `collections` (`"default"` where it names none); the
    /// `anonymous_collections` for callers without a key.
    pub fn collections(&self, caller: &Caller) -> Collections {
        self.policy().collections_of(caller)
    }

    /// Whether `caller`, identified earlier (an async job's submitter), would still be let in:
    /// its key is still configured, or callers without a key still are.
    pub fn still_admits(&self, caller: &Caller) -> bool {
        let policy = self.policy();
        match caller {
            Caller::Key(name) => policy.keys.iter().any(|k| &k.name == name),
            Caller::Client(_) | Caller::Anonymous => policy.allow_anonymous,
        }
    }

    /// Whether `caller` may call `model`.
    pub fn allows(&self, caller: &Caller, model: &str) -> bool {
        self.policy()
            .limits_of(caller)
            .is_none_or(|l| l.models.is_empty() || l.models.iter().any(|m| m == model))
    }

    /// Takes a place for a request of `caller`, or the 429 of the first limit it is over.
    #[cfg(test)]
    pub fn admit(self: &Arc<Self>, caller: &Caller) -> Result<Admitted, ApiError> {
        self.admit_as(caller, Charge::Request)
    }

    /// Admits `caller` as `charge` says, or answers the 429 of the first limit it is over: the
    /// one check of a synchronous request ([`Charge::Request`]), an async job's submission
    /// ([`Charge::Submission`]) and its run ([`Charge::JobRun`]). The place returned holds the
    /// caller's concurrency until dropped where the charge runs work.
    pub fn admit_as(
        self: &Arc<Self>,
        caller: &Caller,
        charge: Charge,
    ) -> Result<Admitted, ApiError> {
        let counts_request = charge.is_request();
        let policy = self.policy();
        let Some(limits) = policy.limits_of(caller) else {
            return Ok(Admitted {
                gate: Arc::clone(self),
                caller: caller.clone(),
                counted: false,
            });
        };
        let now = Instant::now();
        let mut state = self.lock();
        if !state.contains_key(caller) && state.len() >= MAX_WINDOWS {
            evict_idlest(&mut state);
        }
        let w = state.entry(caller.clone()).or_insert_with(|| Window {
            in_flight: 0,
            requests: limits.rpm.map_or(0.0, f64::from),
            tokens: limits.tpm.map_or(0.0, |t| t as f64),
            at: now,
            recent: VecDeque::new(),
            cool_until: None,
        });
        if let Some(cd) = &limits.cooldown {
            if let Some(until) = w.cool_until {
                if now < until {
                    let left = until - now;
                    return Err(cooling(caller, left));
                }
                w.cool_until = None;
            }
            let window = std::time::Duration::from_secs_f64(cd.window_s);
            while w
                .recent
                .front()
                .is_some_and(|t| now.duration_since(*t) >= window)
            {
                w.recent.pop_front();
            }
            // A job's run adds nothing to the window: its submission was the request.
            if counts_request && w.recent.len() >= cd.requests as usize {
                let left = std::time::Duration::from_secs_f64(cd.cooldown_s);
                w.cool_until = Some(now + left);
                w.recent.clear();
                return Err(cooling(caller, left));
            }
        }
        let dt = now.duration_since(w.at).as_secs_f64();
        w.at = now;
        if let Some(rpm) = limits.rpm {
            let cap = f64::from(rpm);
            w.requests = (w.requests + dt * cap / 60.0).min(cap);
        }
        if let Some(tpm) = limits.tpm {
            let cap = tpm as f64;
            w.tokens = (w.tokens + dt * cap / 60.0).min(cap);
        }
        if let Some(max) = limits.max_concurrency
            && charge.runs()
            && w.in_flight >= max
        {
            return Err(too_many(caller, "concurrency", 1));
        }
        if let Some(rpm) = limits.rpm
            && counts_request
            && w.requests < 1.0
        {
            let wait = (1.0 - w.requests) * 60.0 / f64::from(rpm);
            return Err(too_many(caller, "requests-per-minute", wait.ceil() as u64));
        }
        if let Some(tpm) = limits.tpm
            && w.tokens <= 0.0
        {
            let wait = (1.0 - w.tokens) * 60.0 / tpm as f64;
            return Err(too_many(caller, "tokens-per-minute", wait.ceil() as u64));
        }
        if counts_request && limits.rpm.is_some() {
            w.requests -= 1.0;
        }
        if counts_request && limits.cooldown.is_some() {
            w.recent.push_back(now);
        }
        if charge.runs() {
            w.in_flight += 1;
        }
        Ok(Admitted {
            gate: Arc::clone(self),
            caller: caller.clone(),
            counted: charge.runs(),
        })
    }

    /// Counts the tokens an answer used against `caller`'s tokens-per-minute.
    pub fn spent(&self, caller: &Caller, tokens: u64) {
        if tokens == 0
            || self
                .policy()
                .limits_of(caller)
                .is_none_or(|l| l.tpm.is_none())
        {
            return;
        }
        if let Some(w) = self.lock().get_mut(caller) {
            w.tokens -= tokens as f64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(keys: &[(&str, VirtualKey)], anonymous: bool) -> Arc<Gatekeeper> {
        let keys: BTreeMap<String, VirtualKey> = keys
            .iter()
            .map(|(n, k)| (n.to_string(), k.clone()))
            .collect();
        let clients = BTreeMap::from([(
            "*".to_owned(),
            Limits {
                rpm: Some(2),
                ..Limits::default()
            },
        )]);
        Arc::new(Gatekeeper::new(
            GatePolicy::new(&keys, anonymous, &default_only(), &clients, |v| {
                (v == "TEAM_KEY").then(|| "sk-team".to_owned())
            })
            .unwrap(),
        ))
    }

    #[test]
    fn keys_identify_callers_and_unknown_keys_are_refused() {
        let team = VirtualKey {
            key_env: Some("TEAM_KEY".into()),
            models: vec!["small".into()],
            max_concurrency: Some(1),
            ..VirtualKey::default()
        };
        let hashed = VirtualKey {
            key_sha256: Some(
                // sha256("sk-hashed")
                Sha256::digest(b"sk-hashed")
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect(),
            ),
            ..VirtualKey::default()
        };
        let g = gate(&[("team", team), ("ops", hashed)], false);
        assert_eq!(
            g.identify(Some("Bearer sk-team"), None).unwrap(),
            Caller::Key("team".into())
        );
        assert_eq!(
            g.identify(Some("bearer sk-hashed"), Some("c")).unwrap(),
            Caller::Key("ops".into())
        );
        assert_eq!(
            g.identify(Some("Bearer nope"), None).unwrap_err().status,
            401
        );
        assert_eq!(g.identify(None, Some("c")).unwrap_err().status, 401);
        let team = Caller::Key("team".into());
        assert!(g.allows(&team, "small") && !g.allows(&team, "big"));
        assert!(g.allows(&Caller::Key("ops".into()), "big"));
        // One at a time for the team; the place comes back when dropped.
        let first = g.admit(&team).unwrap();
        let e = g.admit(&team).err().unwrap();
        assert_eq!(e.status, 429);
        assert_eq!(e.retry_after_s, Some(1));
        drop(first);
        assert!(g.admit(&team).is_ok());
    }

    #[test]
    fn client_rates_refill_and_say_when_to_come_back() {
        let g = gate(&[], false);
        let c = Caller::Client("batch".into());
        assert_eq!(g.identify(None, Some("batch")).unwrap(), c);
        let _a = g.admit(&c).unwrap();
        let _b = g.admit(&c).unwrap();
        let e = g.admit(&c).err().unwrap();
        assert_eq!(e.status, 429);
        // 2 per minute: the next place in 30 s.
        assert!((29..=30).contains(&e.retry_after_s.unwrap()), "{e:?}");
        assert!(e.message.contains("requests-per-minute"));
    }

    #[test]
    fn tokens_per_minute_are_spent_after_the_answer() {
        let clients = BTreeMap::from([(
            "bulk".to_owned(),
            Limits {
                tpm: Some(600),
                ..Limits::default()
            },
        )]);
        let g = Arc::new(Gatekeeper::new(
            GatePolicy::new(&BTreeMap::new(), true, &default_only(), &clients, |_| None).unwrap(),
        ));
        let c = Caller::Client("bulk".into());
        drop(g.admit(&c).unwrap());
        g.spent(&c, 1200);
        let e = g.admit(&c).err().unwrap();
        // 600 tokens over: a minute (at 10 a second) and a bit.
        assert!((60..=61).contains(&e.retry_after_s.unwrap()), "{e:?}");
        // Others are not limited.
        assert!(g.admit(&Caller::Client("other".into())).is_ok());
        assert!(!g.is_open());
    }

    #[test]
    fn a_job_run_holds_a_place_and_waits_for_tokens_but_is_no_second_request() {
        let clients = BTreeMap::from([(
            "batch".to_owned(),
            Limits {
                rpm: Some(1),
                tpm: Some(600),
                max_concurrency: Some(1),
                ..Limits::default()
            },
        )]);
        let g = Arc::new(Gatekeeper::new(
            GatePolicy::new(&BTreeMap::new(), true, &default_only(), &clients, |_| None).unwrap(),
        ));
        let c = Caller::Client("batch".into());
        // The submission is the minute's one request; it holds no place.
        let submitted = g.admit_as(&c, Charge::Submission).unwrap();
        let e = g.admit_as(&c, Charge::Submission).err().unwrap();
        assert!(e.message.contains("requests-per-minute"), "{e:?}");
        // Its run is no second request, but holds the caller's one place while it runs.
        let run = g.admit_as(&c, Charge::JobRun).unwrap();
        drop(submitted);
        let e = g.admit_as(&c, Charge::JobRun).err().unwrap();
        assert_eq!(e.status, 429);
        assert!(e.message.contains("concurrency"), "{e:?}");
        drop(run);
        // Tokens overdrawn by an answer: the next run waits as a request would.
        g.spent(&c, 1200);
        let e = g.admit_as(&c, Charge::JobRun).err().unwrap();
        assert!(e.message.contains("tokens-per-minute"), "{e:?}");
    }

    #[test]
    fn a_job_run_waits_out_its_callers_cooldown_and_adds_nothing_to_its_window() {
        let clients = BTreeMap::from([(
            "burst".to_owned(),
            Limits {
                cooldown: Some(Cooldown {
                    requests: 1,
                    window_s: 60.0,
                    cooldown_s: 60.0,
                }),
                ..Limits::default()
            },
        )]);
        let g = Arc::new(Gatekeeper::new(
            GatePolicy::new(&BTreeMap::new(), true, &default_only(), &clients, |_| None).unwrap(),
        ));
        let c = Caller::Client("burst".into());
        drop(g.admit(&c).unwrap());
        // Runs do not fill the window ...
        for _ in 0..3 {
            drop(g.admit_as(&c, Charge::JobRun).unwrap());
        }
        // ... a second request does, and starts the cooldown, which a run then waits out.
        assert_eq!(g.admit(&c).err().unwrap().code, Some(COOLDOWN_CODE));
        assert_eq!(
            g.admit_as(&c, Charge::JobRun).err().unwrap().code,
            Some(COOLDOWN_CODE)
        );
    }

    #[test]
    fn bad_key_settings_are_named() {
        let both = VirtualKey {
            key_env: Some("A".into()),
            key_sha256: Some("00".repeat(32)),
            ..VirtualKey::default()
        };
        let keys = BTreeMap::from([("k".to_owned(), both)]);
        let e = GatePolicy::new(&keys, false, &default_only(), &BTreeMap::new(), |_| {
            Some("x".into())
        })
        .unwrap_err();
        assert_eq!(e.key, "keys.k");
        let short = VirtualKey {
            key_sha256: Some("abc".into()),
            ..VirtualKey::default()
        };
        let keys = BTreeMap::from([("k".to_owned(), short)]);
        let e =
            GatePolicy::new(&keys, false, &default_only(), &BTreeMap::new(), |_| None).unwrap_err();
        assert_eq!(e.key, "keys.k.key_sha256");
        let unset = VirtualKey {
            key_env: Some("UNSET".into()),
            ..VirtualKey::default()
        };
        let keys = BTreeMap::from([("k".to_owned(), unset)]);
        let e =
            GatePolicy::new(&keys, false, &default_only(), &BTreeMap::new(), |_| None).unwrap_err();
        assert_eq!(e.key, "keys.k.key_env");
        let bad_collection = VirtualKey {
            key_sha256: Some("00".repeat(32)),
            collections: Some(vec!["alpha".into(), "../beta".into()]),
            ..VirtualKey::default()
        };
        let keys = BTreeMap::from([("k".to_owned(), bad_collection)]);
        let e =
            GatePolicy::new(&keys, false, &default_only(), &BTreeMap::new(), |_| None).unwrap_err();
        assert_eq!(
            (e.key.as_str(), e.value.as_str()),
            ("keys.k.collections", "../beta")
        );
        let e = GatePolicy::new(
            &BTreeMap::new(),
            true,
            &["a b".into()],
            &BTreeMap::new(),
            |_| None,
        )
        .unwrap_err();
        assert_eq!(e.key, "anonymous_collections");
    }

    fn default_only() -> Vec<String> {
        vec!["default".to_owned()]
    }

    #[test]
    fn each_caller_reads_its_collections_and_no_key_means_one_scope() {
        let with = |names: Option<&[&str]>| VirtualKey {
            key_sha256: Some("11".repeat(32)),
            collections: names.map(|n| n.iter().map(|s| s.to_string()).collect()),
            ..VirtualKey::default()
        };
        let keys = BTreeMap::from([
            ("alice".to_owned(), with(Some(&["alpha"]))),
            ("ops".to_owned(), with(Some(&["alpha", "*"]))),
            ("plain".to_owned(), with(None)),
            ("nobody".to_owned(), with(Some(&[]))),
        ]);
        let anonymous = vec!["public".to_owned()];
        let g = Gatekeeper::new(
            GatePolicy::new(&keys, true, &anonymous, &BTreeMap::new(), |_| None).unwrap(),
        );
        let only = |names: &[&str]| {
            Collections::Only(
                names
                    .iter()
                    .map(|n| horos_server_control::Collection::new(*n).unwrap())
                    .collect(),
            )
        };
        let key = |n: &str| Caller::Key(n.to_owned());
        assert_eq!(g.collections(&key("alice")), only(&["alpha"]));
        assert_eq!(g.collections(&key("ops")), Collections::All);
        assert_eq!(g.collections(&key("plain")), only(&["default"]));
        assert_eq!(g.collections(&key("nobody")), only(&[]));
        // A key gone since its caller was identified reads nothing.
        assert_eq!(g.collections(&key("gone")), only(&[]));
        assert_eq!(g.collections(&Caller::Anonymous), only(&["public"]));
        assert_eq!(
            g.collections(&Caller::Client("c".into())),
            only(&["public"])
        );
        // A collection changed is a key changed, or the anonymous ones changed.
        let mut keys2 = keys.clone();
        keys2.insert("alice".to_owned(), with(Some(&["alpha", "beta"])));
        let changes = g.replace(
            GatePolicy::new(&keys2, true, &default_only(), &BTreeMap::new(), |_| None).unwrap(),
        );
        assert_eq!(changes.keys_changed, ["alice"]);
        assert!(changes.anonymous_collections_changed);
        assert_eq!(g.collections(&Caller::Anonymous), only(&["default"]));
        // No key configured: one scope, every caller reads every collection.
        let open = Gatekeeper::new(
            GatePolicy::new(
                &BTreeMap::new(),
                false,
                &default_only(),
                &BTreeMap::new(),
                |_| None,
            )
            .unwrap(),
        );
        assert_eq!(open.collections(&Caller::Anonymous), Collections::All);
    }
}
