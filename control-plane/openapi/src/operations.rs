//! The operations a set of resources offers, as a model both document formats render.
//!
//! Paths, operation ids, tags and `x-kubernetes-action` values follow upstream's naming
//! (`listCoreV1NamespacedPod`, `patchAppsV1NamespacedDeploymentScale`, tag `apps_v1`).

use crate::params::{self, QueryParam};
use crate::resource::ResourceDoc;

/// Definition of the body of delete requests.
pub(crate) const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
/// Definition of the body of patch requests.
pub(crate) const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
/// Definition of delete responses.
pub(crate) const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
/// Definition of watch stream events.
pub(crate) const WATCH_EVENT: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent";

/// HTTP method of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Method {
    Get,
    Put,
    Post,
    Delete,
    Patch,
}

impl Method {
    /// Lower-case name, the key of the operation in a path item.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Method::Get => "get",
            Method::Put => "put",
            Method::Post => "post",
            Method::Delete => "delete",
            Method::Patch => "patch",
        }
    }
}

/// Group, version and kind an operation acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Gvk {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) kind: String,
}

/// The request body of an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Body {
    /// A whole object of this definition, required.
    Object(String),
    /// A patch document; `strategic` adds strategic merge patch to the content types.
    Patch { strategic: bool },
    /// Optional DeleteOptions.
    Delete,
}

/// Which media types a response is offered in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Produces {
    /// A single document.
    Object,
    /// A document, or a watch stream (list operations accept `watch=true`).
    List,
    /// Only a watch stream.
    Watch,
}

/// One operation of a path.
#[derive(Clone, Debug)]
pub(crate) struct Operation {
    pub(crate) method: Method,
    pub(crate) action: &'static str,
    pub(crate) operation_id: String,
    pub(crate) description: String,
    pub(crate) tag: String,
    pub(crate) query: &'static [&'static QueryParam],
    pub(crate) body: Option<Body>,
    /// Status codes answered with `definition`; 401 is added by the renderers.
    pub(crate) codes: &'static [u16],
    pub(crate) definition: String,
    pub(crate) produces: Produces,
    pub(crate) protobuf: bool,
    pub(crate) gvk: Gvk,
}

/// A path parameter.
#[derive(Clone, Debug)]
pub(crate) struct PathParam {
    pub(crate) name: &'static str,
    pub(crate) description: String,
}

/// One path with its operations.
#[derive(Clone, Debug)]
pub(crate) struct PathItem {
    pub(crate) path: String,
    pub(crate) params: Vec<PathParam>,
    pub(crate) shared_query: &'static [&'static QueryParam],
    pub(crate) operations: Vec<Operation>,
}

/// `Core`, `Apps`, `RbacAuthorization`, `Events`: the group as operation ids spell it.
pub(crate) fn group_id(group: &str) -> String {
    if group.is_empty() {
        return "Core".to_owned();
    }
    let trimmed = group.strip_suffix(".k8s.io").unwrap_or(group);
    trimmed
        .split(['.', '-'])
        .map(capitalize)
        .collect::<Vec<_>>()
        .concat()
}

/// Upper-cases the first character.
fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Lower-cases the first character.
fn decapitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// `/api/v1` or `/apis/<group>/<version>`.
pub(crate) fn group_version_prefix(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

/// What every operation of one resource shares.
#[derive(Clone)]
struct Context<'a> {
    res: &'a ResourceDoc,
    gv_id: String,
    scope: &'static str,
    tag: String,
    gvk: Gvk,
    protobuf: bool,
    strategic: bool,
}

impl Context<'_> {
    #[allow(clippy::too_many_arguments)]
    fn op(
        &self,
        method: Method,
        action: &'static str,
        operation_id: String,
        description: String,
        query: &'static [&'static QueryParam],
        body: Option<Body>,
        codes: &'static [u16],
        definition: &str,
        produces: Produces,
    ) -> Operation {
        Operation {
            method,
            action,
            operation_id,
            description,
            tag: self.tag.clone(),
            query,
            body,
            codes,
            definition: definition.to_owned(),
            produces,
            protobuf: self.protobuf,
            gvk: self.gvk.clone(),
        }
    }

    fn id(&self, verb: &str, suffix: &str) -> String {
        format!(
            "{verb}{}{}{}{suffix}",
            self.gv_id, self.scope, self.res.kind
        )
    }
}

/// Group/version/kind of a subresource's definition, given the resource.
pub(crate) type SubresourceGvk<'a> = Box<dyn Fn(&str, &ResourceDoc) -> Option<Gvk> + 'a>;

/// Options for building paths that depend on where the resource comes from.
pub(crate) struct Origin<'a> {
    /// Whether the kind is built in (protobuf and strategic merge patch are offered).
    pub(crate) builtin: bool,
    /// Group/version/kind of a subresource's definition.
    pub(crate) subresource_gvk: SubresourceGvk<'a>,
}

/// All paths of `res`.
pub(crate) fn resource_paths(res: &ResourceDoc, origin: &Origin<'_>) -> Vec<PathItem> {
    let gv_id = format!("{}{}", group_id(&res.group), capitalize(&res.version));
    let ctx = Context {
        res,
        tag: format!("{}_{}", decapitalize(&group_id(&res.group)), res.version),
        gv_id,
        scope: if res.namespaced { "Namespaced" } else { "" },
        gvk: Gvk {
            group: res.group.clone(),
            version: res.version.clone(),
            kind: res.kind.clone(),
        },
        protobuf: origin.builtin,
        strategic: origin.builtin,
    };
    let prefix = group_version_prefix(&res.group, &res.version);
    let ns = if res.namespaced {
        "/namespaces/{namespace}"
    } else {
        ""
    };
    let mut out = Vec::new();
    let collection = format!("{prefix}{ns}/{}", res.plural);
    let item = format!("{collection}/{{name}}");
    out.push(collection_item(&ctx, collection));
    out.push(item_item(&ctx, item.clone()));
    if res.namespaced && res.has_verb("list") {
        out.push(all_namespaces_item(
            &ctx,
            format!("{prefix}/{}", res.plural),
        ));
    }
    if res.has_verb("watch") {
        out.extend(watch_items(&ctx, &prefix, ns));
    }
    for sub in &res.subresources {
        let gvk = (origin.subresource_gvk)(&sub.definition, res).unwrap_or_else(|| ctx.gvk.clone());
        let sub_ctx = Context { gvk, ..ctx.clone() };
        out.push(subresource_item(&sub_ctx, &item, sub));
    }
    out.retain(|p| !p.operations.is_empty());
    out
}

fn namespace_param() -> PathParam {
    PathParam {
        name: "namespace",
        description: "object name and auth scope, such as for teams and projects".to_owned(),
    }
}

fn name_param(what: &str) -> PathParam {
    PathParam {
        name: "name",
        description: format!("name of the {what}"),
    }
}

fn scope_params(ctx: &Context<'_>, with_name: bool) -> Vec<PathParam> {
    let mut params = Vec::new();
    if with_name {
        params.push(name_param(&ctx.res.kind));
    }
    if ctx.res.namespaced {
        params.push(namespace_param());
    }
    params
}

fn collection_item(ctx: &Context<'_>, path: String) -> PathItem {
    let res = ctx.res;
    let kind = &res.kind;
    let mut ops = Vec::new();
    if res.has_verb("list") {
        ops.push(ctx.op(
            Method::Get,
            "list",
            ctx.id("list", ""),
            format!("list or watch objects of kind {kind}"),
            params::LIST,
            None,
            &[200],
            &res.list_definition,
            Produces::List,
        ));
    }
    if res.has_verb("create") {
        ops.push(ctx.op(
            Method::Post,
            "post",
            ctx.id("create", ""),
            format!("create a {kind}"),
            params::WRITE,
            Some(Body::Object(res.definition.clone())),
            &[200, 201, 202],
            &res.definition,
            Produces::Object,
        ));
    }
    if res.has_verb("deletecollection") {
        ops.push(ctx.op(
            Method::Delete,
            "deletecollection",
            format!("delete{}Collection{}{kind}", ctx.gv_id, ctx.scope),
            format!("delete collection of {kind}"),
            params::DELETE_COLLECTION,
            Some(Body::Delete),
            &[200],
            STATUS,
            Produces::Object,
        ));
    }
    PathItem {
        path,
        params: scope_params(ctx, false),
        shared_query: params::SHARED,
        operations: ops,
    }
}

fn item_item(ctx: &Context<'_>, path: String) -> PathItem {
    let res = ctx.res;
    let kind = &res.kind;
    let def = &res.definition;
    let mut ops = Vec::new();
    if res.has_verb("get") {
        ops.push(ctx.op(
            Method::Get,
            "get",
            ctx.id("read", ""),
            format!("read the specified {kind}"),
            params::READ,
            None,
            &[200],
            def,
            Produces::Object,
        ));
    }
    if res.has_verb("update") {
        ops.push(ctx.op(
            Method::Put,
            "put",
            ctx.id("replace", ""),
            format!("replace the specified {kind}"),
            params::WRITE,
            Some(Body::Object(def.clone())),
            &[200, 201],
            def,
            Produces::Object,
        ));
    }
    if res.has_verb("delete") {
        ops.push(ctx.op(
            Method::Delete,
            "delete",
            ctx.id("delete", ""),
            format!("delete a {kind}"),
            params::DELETE,
            Some(Body::Delete),
            &[200, 202],
            STATUS,
            Produces::Object,
        ));
    }
    if res.has_verb("patch") {
        ops.push(ctx.op(
            Method::Patch,
            "patch",
            ctx.id("patch", ""),
            format!("partially update the specified {kind}"),
            params::PATCH,
            Some(Body::Patch {
                strategic: ctx.strategic,
            }),
            &[200, 201],
            def,
            Produces::Object,
        ));
    }
    PathItem {
        path,
        params: scope_params(ctx, true),
        shared_query: params::SHARED,
        operations: ops,
    }
}

fn all_namespaces_item(ctx: &Context<'_>, path: String) -> PathItem {
    let res = ctx.res;
    let op = ctx.op(
        Method::Get,
        "list",
        format!("list{}{}ForAllNamespaces", ctx.gv_id, res.kind),
        format!("list or watch objects of kind {}", res.kind),
        params::LIST,
        None,
        &[200],
        &res.list_definition,
        Produces::List,
    );
    PathItem {
        path,
        params: Vec::new(),
        shared_query: params::SHARED,
        operations: vec![op],
    }
}

fn watch_items(ctx: &Context<'_>, prefix: &str, ns: &str) -> Vec<PathItem> {
    let res = ctx.res;
    let kind = &res.kind;
    let list_path = format!("{prefix}/watch{ns}/{}", res.plural);
    let mut items = Vec::new();
    let watch_op = |action: &'static str, id: String, description: String| {
        ctx.op(
            Method::Get,
            action,
            id,
            description,
            params::READ,
            None,
            &[200],
            WATCH_EVENT,
            Produces::Watch,
        )
    };
    if res.has_verb("list") {
        items.push(PathItem {
            path: list_path.clone(),
            params: scope_params(ctx, false),
            shared_query: params::LIST_AND_SHARED,
            operations: vec![watch_op(
                "watchlist",
                ctx.id("watch", "List"),
                format!("watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."),
            )],
        });
        if res.namespaced {
            items.push(PathItem {
                path: format!("{prefix}/watch/{}", res.plural),
                params: Vec::new(),
                shared_query: params::LIST_AND_SHARED,
                operations: vec![watch_op(
                    "watchlist",
                    format!("watch{}{kind}ListForAllNamespaces", ctx.gv_id),
                    format!("watch individual changes to a list of {kind}. deprecated: use the 'watch' parameter with a list operation instead."),
                )],
            });
        }
    }
    if res.has_verb("get") {
        items.push(PathItem {
            path: format!("{list_path}/{{name}}"),
            params: scope_params(ctx, true),
            shared_query: params::LIST_AND_SHARED,
            operations: vec![watch_op(
                "watch",
                ctx.id("watch", ""),
                format!("watch changes to an object of kind {kind}. deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter."),
            )],
        });
    }
    items
}

fn subresource_item(ctx: &Context<'_>, item: &str, sub: &crate::SubresourceDoc) -> PathItem {
    let res = ctx.res;
    let kind = &res.kind;
    let name = &sub.name;
    let suffix = capitalize(name);
    let def = &sub.definition;
    let mut ops = Vec::new();
    if sub.has_verb("get") {
        ops.push(ctx.op(
            Method::Get,
            "get",
            ctx.id("read", &suffix),
            format!("read {name} of the specified {kind}"),
            params::READ,
            None,
            &[200],
            def,
            Produces::Object,
        ));
    }
    if sub.has_verb("create") {
        ops.push(ctx.op(
            Method::Post,
            "post",
            ctx.id("create", &suffix),
            format!("create {name} of a {kind}"),
            params::WRITE,
            Some(Body::Object(def.clone())),
            &[200, 201, 202],
            def,
            Produces::Object,
        ));
    }
    if sub.has_verb("update") {
        ops.push(ctx.op(
            Method::Put,
            "put",
            ctx.id("replace", &suffix),
            format!("replace {name} of the specified {kind}"),
            params::WRITE,
            Some(Body::Object(def.clone())),
            &[200, 201],
            def,
            Produces::Object,
        ));
    }
    if sub.has_verb("patch") {
        ops.push(ctx.op(
            Method::Patch,
            "patch",
            ctx.id("patch", &suffix),
            format!("partially update {name} of the specified {kind}"),
            params::PATCH,
            Some(Body::Patch {
                strategic: ctx.strategic,
            }),
            &[200, 201],
            def,
            Produces::Object,
        ));
    }
    let what = match name.as_str() {
        "status" | "scale" => kind.clone(),
        _ => sub.definition.rsplit('.').next().unwrap_or(name).to_owned(),
    };
    let mut params = vec![name_param(&what)];
    if res.namespaced {
        params.push(namespace_param());
    }
    PathItem {
        path: format!("{item}/{name}"),
        params,
        shared_query: params::SHARED,
        operations: ops,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SubresourceDoc;

    fn deployment() -> ResourceDoc {
        let verbs = [
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ];
        ResourceDoc {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            plural: "deployments".into(),
            namespaced: true,
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            subresources: vec![SubresourceDoc {
                name: "scale".into(),
                definition: "io.k8s.api.autoscaling.v1.Scale".into(),
                verbs: vec!["get".into(), "patch".into(), "update".into()],
            }],
            definition: "io.k8s.api.apps.v1.Deployment".into(),
            list_definition: "io.k8s.api.apps.v1.DeploymentList".into(),
        }
    }

    fn scale_gvk(def: &str, _: &ResourceDoc) -> Option<Gvk> {
        (def == "io.k8s.api.autoscaling.v1.Scale").then(|| Gvk {
            group: "autoscaling".into(),
            version: "v1".into(),
            kind: "Scale".into(),
        })
    }

    #[test]
    fn group_ids_follow_upstream() {
        assert_eq!(group_id(""), "Core");
        assert_eq!(group_id("apps"), "Apps");
        assert_eq!(group_id("rbac.authorization.k8s.io"), "RbacAuthorization");
        assert_eq!(group_id("apiextensions.k8s.io"), "Apiextensions");
        assert_eq!(group_id("stable.example-corp.com"), "StableExampleCorpCom");
    }

    #[test]
    fn deployment_paths_and_ids() {
        let origin = Origin {
            builtin: true,
            subresource_gvk: Box::new(scale_gvk),
        };
        let items = resource_paths(&deployment(), &origin);
        let paths: Vec<_> = items.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/apis/apps/v1/namespaces/{namespace}/deployments",
                "/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
                "/apis/apps/v1/deployments",
                "/apis/apps/v1/watch/namespaces/{namespace}/deployments",
                "/apis/apps/v1/watch/deployments",
                "/apis/apps/v1/watch/namespaces/{namespace}/deployments/{name}",
                "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale",
            ]
        );
        let ids: Vec<_> = items[1]
            .operations
            .iter()
            .map(|o| o.operation_id.as_str())
            .collect();
        assert_eq!(
            ids,
            [
                "readAppsV1NamespacedDeployment",
                "replaceAppsV1NamespacedDeployment",
                "deleteAppsV1NamespacedDeployment",
                "patchAppsV1NamespacedDeployment"
            ]
        );
        assert_eq!(
            items[0].operations[2].operation_id,
            "deleteAppsV1CollectionNamespacedDeployment"
        );
        assert_eq!(
            items[2].operations[0].operation_id,
            "listAppsV1DeploymentForAllNamespaces"
        );
        let scale_patch = &items[6].operations[2];
        assert_eq!(
            scale_patch.operation_id,
            "patchAppsV1NamespacedDeploymentScale"
        );
        assert_eq!(scale_patch.gvk.kind, "Scale");
        assert_eq!(items[0].operations[0].tag, "apps_v1");
    }

    #[test]
    fn cluster_scoped_without_verbs_has_no_paths() {
        let mut res = deployment();
        res.namespaced = false;
        res.verbs = vec!["get".into()];
        res.subresources.clear();
        let origin = Origin {
            builtin: false,
            subresource_gvk: Box::new(scale_gvk),
        };
        let items = resource_paths(&res, &origin);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].path, "/apis/apps/v1/deployments/{name}");
        assert_eq!(items[0].operations[0].operation_id, "readAppsV1Deployment");
        assert_eq!(items[0].params.len(), 1);
    }
}
