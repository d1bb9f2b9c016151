//! Tenancy: who calls ([`caller`]) and what each caller may do ([`grants`], as configured).
//! Keys and callers' limits enforced ([`limits`], with
//! the constant-time comparison of [`auth`]), client profiles ([`profiles`], changed through
//! the admin API in [`profile_admin`]), the registry of who calls how often ([`requestors`]),
//! usage per caller and model ([`usage`]), and all of it reloaded while serving ([`reload`]).

pub(crate) mod auth;
pub(crate) mod caller;
mod callers;
mod grants;
pub(crate) mod limits;
pub(crate) mod profile_admin;
pub(crate) mod profiles;
pub(crate) mod reload;
pub(crate) mod requestors;
pub(crate) mod usage;

pub(crate) use callers::Callers;
pub(crate) use reload::Reloader;
pub use reload::{
    Reading, ReloadError, ReloadHandle, ReloadReport, SourceError, Tenancy, TenancySource,
};
