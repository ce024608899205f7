//! Core events: field selectors on the involved object and the `kubectl get events` columns.

use serde_json::{json, Value};

use super::{name_of, or_none, timestamp_age, Column, Strategy};

pub(super) struct EventStrategy;

impl Strategy for EventStrategy {
    fn reset_status_on_create(&self) -> bool {
        false
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ]
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::new("Last Seen", "string", "Time when last event occurred"),
            Column::new("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future."),
            Column::new("Reason", "string", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
            Column::new("Object", "string", "The object that this event is about."),
            Column::new("Message", "string", "A human-readable description of the status of this operation."),
            Column::wide("Subobject", "string", "The subobject that this event is about."),
            Column::wide("Source", "string", "The component reporting this event. Should be a short machine understandable string."),
            Column::wide("First Seen", "string", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"),
            Column::wide("Count", "string", "The number of times this event has occurred."),
            Column::wide("Name", "string", "The name of the event."),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let last = obj["lastTimestamp"]
            .as_str()
            .or(obj["eventTime"].as_str())
            .or(obj["metadata"]["creationTimestamp"].as_str());
        let first = obj["firstTimestamp"].as_str().or(obj["eventTime"].as_str());
        let involved = &obj["involvedObject"];
        let object = format!(
            "{}/{}",
            involved["kind"].as_str().unwrap_or("").to_ascii_lowercase(),
            involved["name"].as_str().unwrap_or("")
        );
        let source = obj["source"]["component"]
            .as_str()
            .or(obj["reportingComponent"].as_str());
        vec![
            json!(timestamp_age(last)),
            json!(obj["type"].as_str().unwrap_or("")),
            json!(obj["reason"].as_str().unwrap_or("")),
            json!(object),
            json!(obj["message"].as_str().unwrap_or("")),
            json!(involved["fieldPath"].as_str().unwrap_or("")),
            json!(or_none(source)),
            json!(timestamp_age(first)),
            json!(obj["count"].as_i64().unwrap_or(1).to_string()),
            json!(name_of(obj)),
        ]
    }
}
