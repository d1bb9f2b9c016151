//! Which models a request may try: its profile applied, the model or its task's ladder, each
//! rung allowed to the caller and serving the request's route.

use super::*;

/// The models a request may try, best first.
pub(super) struct Ladder {
    pub(super) models: Vec<String>,
    /// A task's pick and why (a decision for the status page).
    pub(super) picked: Option<(String, String)>,
}

impl Core {
    /// Whether `caller` may make this call now, as [`Core::dispatch`] would decide before it
    /// takes a place or loads a model: its profile applied, the model (or a model of its task)
    /// known, allowed to the caller and serving the route. An async job is checked so when it is
    /// submitted, and again when it runs.
    pub fn check_call(
        &self,
        route: Route,
        body: &RawObject,
        meta: &RequestMeta,
        caller: &Caller,
    ) -> Result<(), ApiError> {
        self.call_models(route, body, meta, caller).map(drop)
    }

    /// The models this call may try, best first, checked as [`Core::check_call`] checks it (the
    /// caller's profile applied: its aliases resolved).
    pub fn call_models(
        &self,
        route: Route,
        body: &RawObject,
        meta: &RequestMeta,
        caller: &Caller,
    ) -> Result<Vec<String>, ApiError> {
        let profile = self.callers.profile_of(caller);
        let (mut body, mut meta) = (body.clone(), meta.clone());
        if let Some(p) = &profile {
            super::apply_profile(p, &mut meta, &mut body)?;
        }
        self.ladder(route, &meta, &body, caller, profile.as_deref())
            .map(|(ladder, _)| ladder.models)
    }

    /// The models a request on `route` may try, best first, and its task. A rung whose server
    /// does not serve the route is left out.
    pub(super) fn ladder<'a>(
        &'a self,
        route: Route,
        meta: &RequestMeta,
        body: &RawObject,
        caller: &Caller,
        profile: Option<&ClientProfile>,
    ) -> Result<(Ladder, Option<&'a TaskSpec>), ApiError> {
        let allows = |m: &str| self.callers.allows(caller, profile, m);
        if route == Route::Speech {
            crate::data::speech::check(body)?;
        }
        let refused = |what: &str| {
            ApiError::new(
                StatusCode::FORBIDDEN,
                "permission_error",
                format!("{} may not call {what}", caller.label()),
            )
            .param("model")
            .code("model_not_allowed")
        };
        let model_field = body.get_str("model");
        let task_name = meta.task.clone().or_else(|| {
            model_field
                .as_deref()
                .and_then(|m| m.strip_prefix("task:"))
                .map(str::to_owned)
        });
        let Some(name) = task_name else {
            let model = model_field
                .ok_or_else(|| ApiError::bad_request("`model` is required").param("model"))?;
            if self.upstream().readiness(&model) == Readiness::Unknown {
                return Err(ApiError::model_not_found(&model));
            }
            if !allows(&model) {
                return Err(refused(&format!("`{model}`")));
            }
            self.serves(route, &model)?;
            return Ok((
                Ladder {
                    models: vec![model],
                    picked: None,
                },
                None,
            ));
        };
        let task = self.cfg.tasks.get(&name).ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("the task `{name}` does not exist"),
            )
            .param("x_task")
            .code("task_not_found")
        })?;
        let allow_cloud = self.routes.allow_cloud_fallback();
        let is_cloud = |m: &str| self.is_cloud(m);
        let up = self.upstream();
        // A rung the caller may not call, or that does not serve the route, is as good as
        // unknown to it.
        let readiness = |m: &str| {
            if allows(m) && self.serves_route(route, m) {
                up.readiness(m)
            } else {
                Readiness::Unknown
            }
        };
        if task.models.iter().all(|m| !allows(m)) {
            return Err(refused(&format!("any model of the task `{name}`")));
        }
        let r = tasks::resolve(&name, task, allow_cloud, is_cloud, readiness)
            .ok_or_else(|| ApiError::bad_request(format!("the task `{name}` has no model")))?;
        let picked = (r.model.clone(), r.reason);
        let mut ladder = vec![r.model];
        if !task.pin_primary {
            // The rest of the ladder in its order, models this process does not serve left out.
            for m in tasks::candidates(task, allow_cloud, is_cloud) {
                if !ladder.iter().any(|l| l == m) && readiness(m) != Readiness::Unknown {
                    ladder.push(m.to_owned());
                }
            }
        }
        if ladder.iter().all(|m| readiness(m) == Readiness::Unknown) {
            if !allows(&ladder[0]) {
                return Err(refused(&format!("`{}`", ladder[0])));
            }
            self.serves(route, &ladder[0])?;
            return Err(ApiError::model_not_found(&ladder[0]));
        }
        Ok((
            Ladder {
                models: ladder,
                picked: Some(picked),
            },
            Some(task),
        ))
    }

    /// Refuses a request on `route` that `model`'s server would not serve: the path it would be
    /// sent to (after the model's manifest) is not one its upstream declares for it.
    pub(super) fn serves(&self, route: Route, model: &str) -> Result<(), ApiError> {
        if self.serves_route(route, model) {
            return Ok(());
        }
        let path = manifest::upstream_path(&self.manifest, route, model);
        let paths = self.upstream().paths(model).unwrap_or_default();
        let serves = match paths.is_empty() {
            true => "no request path".to_owned(),
            false => paths.join(", "),
        };
        Err(ApiError::bad_request(format!(
            "the model `{model}` does not serve {path}: it serves {serves}"
        ))
        .param("model")
        .code("unsupported_endpoint")
        .extra(json!({"model": model, "serves": paths})))
    }

    /// Whether `model`'s server serves the path a request on `route` goes to (or declares none).
    pub(super) fn serves_route(&self, route: Route, model: &str) -> bool {
        let path = manifest::upstream_path(&self.manifest, route, model);
        self.upstream().serves_path(model, path).unwrap_or(true)
    }

    /// Whether `model` is a cloud model for the fallback guard: a remote model, or a name with
    /// one of `cloud_prefixes`.
    pub fn is_cloud(&self, model: &str) -> bool {
        self.routes.is_remote(model)
            || self
                .cfg
                .cloud_prefixes
                .iter()
                .any(|p| model.starts_with(p.as_str()))
    }
}
