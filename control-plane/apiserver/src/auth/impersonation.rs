//! Impersonation: `Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid` and
//! `Impersonate-Extra-<key>` headers make a request act as another user — each one allowed only
//! if the real user may `impersonate` it (`users`, `groups`, `serviceaccounts`,
//! `uids.authentication.k8s.io`, `userextras/<key>.authentication.k8s.io`), as upstream.

use http::HeaderMap;

use super::{UserInfo, AUTHENTICATED};
use crate::error::ApiError;
use crate::rbac::{Attributes, Authorizer};

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA: &str = "impersonate-extra-";

fn text(v: &http::HeaderValue) -> Result<String, ApiError> {
    v.to_str()
        .map(str::to_string)
        .map_err(|_| ApiError::BadRequest("impersonation headers must be ASCII".into()))
}

/// The user the request acts as: `user` itself without impersonation headers.
pub fn apply(
    headers: &HeaderMap,
    user: UserInfo,
    authz: &Authorizer,
) -> Result<UserInfo, ApiError> {
    let name = headers.get(USER).map(text).transpose()?;
    let groups = headers
        .get_all(GROUP)
        .iter()
        .map(text)
        .collect::<Result<Vec<_>, _>>()?;
    let uid = headers.get(UID).map(text).transpose()?;
    let mut extra: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (k, v) in headers {
        if let Some(key) = k.as_str().strip_prefix(EXTRA) {
            let key = percent_encoding::percent_decode_str(key)
                .decode_utf8_lossy()
                .into_owned();
            extra.entry(key).or_default().push(text(v)?);
        }
    }
    let Some(name) = name else {
        if !groups.is_empty() || uid.is_some() || !extra.is_empty() {
            return Err(ApiError::BadRequest(
                "requested impersonation of groups, uid or extra without impersonating a user"
                    .into(),
            ));
        }
        return Ok(user);
    };
    let check = |a: Attributes| -> Result<(), ApiError> {
        if authz.authorize(&user, &a).allowed() {
            return Ok(());
        }
        let what = if a.api_group.is_empty() {
            a.full_resource()
        } else {
            format!("{}.{}", a.full_resource(), a.api_group)
        };
        let scope = if a.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{}\"", a.namespace)
        };
        Err(ApiError::Forbidden(format!(
            "{what} \"{}\" is forbidden: User \"{}\" cannot impersonate resource \"{}\" in API group \"{}\" {scope}",
            a.name, user.name, a.full_resource(), a.api_group
        )))
    };
    let mut target = UserInfo {
        name: name.clone(),
        ..UserInfo::default()
    };
    if let Some(sa) = name.strip_prefix("system:serviceaccount:") {
        let (ns, sa_name) = sa.split_once(':').ok_or_else(|| {
            ApiError::BadRequest(format!("invalid service account name {name:?}"))
        })?;
        check(Attributes::resource(
            "impersonate",
            "",
            "serviceaccounts",
            "",
            ns,
            sa_name,
        ))?;
        if groups.is_empty() {
            target.groups = vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
            ];
        }
    } else {
        check(Attributes::resource(
            "impersonate",
            "",
            "users",
            "",
            "",
            &name,
        ))?;
    }
    for g in &groups {
        check(Attributes::resource("impersonate", "", "groups", "", "", g))?;
    }
    if let Some(uid) = &uid {
        check(Attributes::resource(
            "impersonate",
            "authentication.k8s.io",
            "uids",
            "",
            "",
            uid,
        ))?;
        target.uid = uid.clone();
    }
    for (k, values) in &extra {
        for v in values {
            check(Attributes::resource(
                "impersonate",
                "authentication.k8s.io",
                "userextras",
                k,
                "",
                v,
            ))?;
        }
    }
    target.groups.extend(groups);
    target.extra = extra;
    if name != "system:anonymous" && !target.groups.iter().any(|g| g == AUTHENTICATED) {
        target.groups.push(AUTHENTICATED.into());
    }
    Ok(target)
}
