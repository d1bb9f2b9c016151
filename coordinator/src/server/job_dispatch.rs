//! The gateway as the job workers' [`Dispatch`]: a job's call admitted as a synchronous request
//! on its route is ([`admission::take_place`] with its caller's limits, then [`Core::dispatch`]:
//! profile, allowed models, ladder, priority, budget), its answer read whole within its budget,
//! usage counted to its caller. The adapter lives here, with the admission it adapts; the
//! workers see only the trait.

use std::sync::Arc;

use async_trait::async_trait;
use http::StatusCode;
use http_body_util::{BodyExt, Limited};

use super::admission;
use crate::data::core::{Call, Core};
use crate::data::proxy::Tracker;
use crate::data::route::Route;
use crate::error::ApiError;
use crate::jobs::{Answered, Dispatch, DispatchError, JobCall};
use crate::tenancy::limits::Charge;

/// [`Core`] behind the job workers' seam.
pub(crate) struct CoreDispatch(pub Arc<Core>);

#[async_trait]
impl Dispatch for CoreDispatch {
    async fn dispatch(&self, call: JobCall) -> Result<Answered, DispatchError> {
        let core = &self.0;
        let JobCall {
            route,
            body,
            meta,
            caller,
            received,
            budget,
            max_answer_bytes,
        } = call;
        // The caller identified at submission must still be let in (a key removed since stops
        // its jobs), as a synchronous request's key is checked when it arrives.
        if !core.callers().gate().still_admits(&caller) {
            return Err(DispatchError::Refused(
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "invalid_request_error",
                    format!(
                        "{} submitted this job and is no longer let in (its key was removed)",
                        caller.label()
                    ),
                )
                .code("invalid_api_key"),
            ));
        }
        let mut tracker = Tracker::new(Arc::clone(core.metrics()), Route::Job, received);
        let answered = async {
            // Its place under the caller's limits, held until the answer is read.
            tracker.admitted = admission::take_place(core, &caller, Charge::JobRun)?;
            tracker.caller = Some((caller.clone(), Arc::clone(core.callers().gate())));
            let call = Call {
                route,
                body,
                meta,
                received,
                default_budget_s: core.cfg().job_budget_s,
                caller,
            };
            core.dispatch(call, &mut tracker).await
        }
        .await;
        let resp = answered.map_err(|e| {
            tracker.status = e.status.as_u16();
            DispatchError::Refused(e)
        })?;
        let status = resp.status().as_u16();
        tracker.status = status;
        let content_type = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let answer = Limited::new(resp.into_body(), max_answer_bytes).collect();
        // A budget past what the clock can hold (a configuration's absurd `job_budget_s`) is
        // no deadline at all, not a panic.
        let answer = async {
            match received.checked_add(budget) {
                Some(deadline) => tokio::time::timeout_at(deadline.into(), answer).await,
                None => Ok(answer.await),
            }
        };
        let body = match answer.await {
            Ok(Ok(b)) => b.to_bytes(),
            Ok(Err(e)) => return Err(DispatchError::Broken(e)),
            Err(_) => return Err(DispatchError::OverBudget(budget)),
        };
        tracker.tail.push(&body);
        Ok(Answered {
            status,
            content_type,
            body,
        })
    }
}
