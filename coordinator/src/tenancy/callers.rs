//! The gateway's tenancy part: who may call (keys and limits, the [`Gatekeeper`]) and each
//! caller's defaults (the [`Profiles`]), both changed while serving.

use std::sync::Arc;

use crate::tenancy::limits::{Caller, Gatekeeper};
use crate::tenancy::profiles::{ClientProfile, Profiles};

/// Who calls and what each caller may do.
pub(crate) struct Callers {
    gate: Arc<Gatekeeper>,
    profiles: Arc<Profiles>,
}

impl Callers {
    /// The gate and the profiles a coordinator starts with.
    pub(crate) fn new(gate: Arc<Gatekeeper>, profiles: Arc<Profiles>) -> Self {
        Self { gate, profiles }
    }

    /// Keys and limits: a caller identified, admitted, its place given back (a request's
    /// tracker holds the gate until its answer ends).
    pub(crate) fn gate(&self) -> &Arc<Gatekeeper> {
        &self.gate
    }

    /// The profiles, for their admin routes and a reload.
    pub(crate) fn profiles(&self) -> &Arc<Profiles> {
        &self.profiles
    }

    /// `caller`'s profile, if it has one.
    pub(crate) fn profile_of(&self, caller: &Caller) -> Option<Arc<ClientProfile>> {
        self.profiles.of(caller)
    }

    /// Whether `caller` may call `model`: its key's limits and its profile (`profile`, read
    /// once for the request) both allow it.
    pub(crate) fn allows(
        &self,
        caller: &Caller,
        profile: Option<&ClientProfile>,
        model: &str,
    ) -> bool {
        self.gate.allows(caller, model) && profile.is_none_or(|p| p.allows(model))
    }
}
