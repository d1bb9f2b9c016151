//! Admission: who goes first and when there is room. The priority queue of waiting requests
//! under the concurrency limits ([`scheduler`]), the meaning of a priority ([`priority`]), the
//! wait for GPU room ([`room`]) and the learned cold-load times that decide whether a cold model
//! can be waited for ([`loadclock`]). Keys and callers' limits, checked before a request gets
//! here, are tenancy's (`crate::tenancy`).

pub(crate) mod loadclock;
pub(crate) mod priority;
pub(crate) mod room;
pub(crate) mod scheduler;
