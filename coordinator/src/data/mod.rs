//! The data plane: what a `/v1/` request goes through once admitted. Its body read and its
//! extension fields taken out ([`request`]), its route ([`route`]), the model's manifest applied
//! ([`manifest`]), its task's ladder walked and the model acquired ([`core`]), the answer passed
//! back frame by frame ([`proxy`]); the routes that are more than a forward: searches
//! ([`search`]), answers with citations ([`answers`]), speech ([`speech`]).
//! What it records on its way: counters and histograms ([`metrics`], plain atomics the control
//! plane reads) and decisions with their reasons ([`decision`]).

pub(crate) mod answers;
pub(crate) mod core;
pub(crate) mod decision;
pub(crate) mod manifest;
pub(crate) mod metrics;
pub(crate) mod proxy;
pub(crate) mod record;
pub(crate) mod request;
pub(crate) mod route;
pub(crate) mod search;
pub(crate) mod speech;
