//! How a configuration field is spelled in the file: each field's type
//! decodes itself from, and encodes itself to, its JSON value
//! ([`ConfigValue`]); [`config_section!`] declares a section's fields once
//! (name in the file, type, default, doc) and derives its struct, its
//! defaults, its decoder and its encoder from that one declaration.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Map, Value};

use super::ConfigError;
use crate::duration::{format_go_duration, parse_go_duration};
use crate::quantity::{parse_bytes, parse_cpu_millis_nearest};

/// `field` (a dotted path in the file) holds a value of another type.
pub fn wrong_type(field: &str, expected: &'static str, v: &Value) -> ConfigError {
    ConfigError::WrongType {
        field: field.to_owned(),
        expected,
        found: describe(v),
    }
}

/// `field` holds a value of its type that cannot be used.
pub fn invalid_value(field: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        field: field.to_owned(),
        message: message.into(),
    }
}

/// A short, human description of a JSON value for error messages.
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "a mapping".to_owned(),
    }
}

/// The type of a configuration field, as upstream's JSON spells it. A
/// null in the file leaves the field's default; so does Go's zero value of
/// a field upstream's defaulting replaces (see [`config_section!`]).
pub trait ConfigValue: Sized {
    /// The value the file gives (never null) for `field`.
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError>;
    /// The value as `/configz` shows it.
    fn encode(&self) -> Value;
    /// Go's zero value of the field's type.
    fn is_zero(&self) -> bool;
}

impl ConfigValue for bool {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        v.as_bool().ok_or_else(|| wrong_type(field, "a boolean", v))
    }
    fn encode(&self) -> Value {
        Value::Bool(*self)
    }
    fn is_zero(&self) -> bool {
        !*self
    }
}

impl ConfigValue for String {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        v.as_str()
            .map(str::to_owned)
            .ok_or_else(|| wrong_type(field, "a string", v))
    }
    fn encode(&self) -> Value {
        Value::String(self.clone())
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

impl ConfigValue for PathBuf {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        String::decode(v, field).map(PathBuf::from)
    }
    fn encode(&self) -> Value {
        Value::String(self.display().to_string())
    }
    fn is_zero(&self) -> bool {
        self.as_os_str().is_empty()
    }
}

/// An optional path: empty in the file is none.
impl ConfigValue for Option<PathBuf> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        PathBuf::decode(v, field).map(|p| (!p.is_zero()).then_some(p))
    }
    fn encode(&self) -> Value {
        self.as_ref().map_or(Value::Null, PathBuf::encode)
    }
    fn is_zero(&self) -> bool {
        self.is_none()
    }
}

/// A Go duration string such as `1m0s`.
impl ConfigValue for Duration {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        let s = v
            .as_str()
            .ok_or_else(|| wrong_type(field, "a duration string such as \"1m0s\"", v))?;
        parse_go_duration(s).map_err(|e| invalid_value(field, e.to_string()))
    }
    fn encode(&self) -> Value {
        Value::String(format_go_duration(*self))
    }
    fn is_zero(&self) -> bool {
        Duration::is_zero(self)
    }
}

/// Integers, each within the range of its Go type.
macro_rules! integer {
    ($ty:ty, $as:ident, $expected:literal) => {
        impl ConfigValue for $ty {
            fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
                v.$as()
                    .and_then(|n| <$ty>::try_from(n).ok())
                    .ok_or_else(|| wrong_type(field, $expected, v))
            }
            fn encode(&self) -> Value {
                Value::from(*self)
            }
            fn is_zero(&self) -> bool {
                *self == 0
            }
        }
    };
}
integer!(u16, as_u64, "an integer port between 0 and 65535");
integer!(u32, as_u64, "a non-negative 32-bit integer");
integer!(i32, as_i64, "a 32-bit integer");
integer!(i64, as_i64, "a 64-bit integer");

/// An optional 32-bit integer (unset: none).
impl ConfigValue for Option<i32> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        i32::decode(v, field).map(Some)
    }
    fn encode(&self) -> Value {
        self.map_or(Value::Null, Value::from)
    }
    fn is_zero(&self) -> bool {
        self.is_none()
    }
}

/// An optional boolean (unset: decided with other fields).
impl ConfigValue for Option<bool> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        bool::decode(v, field).map(Some)
    }
    fn encode(&self) -> Value {
        self.map_or(Value::Null, Value::Bool)
    }
    fn is_zero(&self) -> bool {
        self.is_none()
    }
}

/// A list of strings.
impl ConfigValue for Vec<String> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        const EXPECTED: &str = "a list of strings";
        v.as_array()
            .ok_or_else(|| wrong_type(field, EXPECTED, v))?
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| wrong_type(field, EXPECTED, item))
            })
            .collect()
    }
    fn encode(&self) -> Value {
        Value::from(self.clone())
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

/// An optional number (memoryThrottlingFactor; unset: none).
impl ConfigValue for Option<f64> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        v.as_f64()
            .map(Some)
            .ok_or_else(|| wrong_type(field, "a number", v))
    }
    fn encode(&self) -> Value {
        self.map_or(Value::Null, Value::from)
    }
    fn is_zero(&self) -> bool {
        self.is_none()
    }
}

/// A list of 32-bit integers (tlsCurvePreferences).
impl ConfigValue for Vec<i32> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        const EXPECTED: &str = "a list of 32-bit integers";
        v.as_array()
            .ok_or_else(|| wrong_type(field, EXPECTED, v))?
            .iter()
            .map(|item| {
                item.as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .ok_or_else(|| wrong_type(field, EXPECTED, item))
            })
            .collect()
    }
    fn encode(&self) -> Value {
        Value::from(self.clone())
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

/// A field whose type is an API (or config) type with its own serde
/// shape: decoded by serde, `expected` naming the shape in errors.
fn decode_serde<T: serde::de::DeserializeOwned>(
    v: &Value,
    field: &str,
    expected: &'static str,
) -> Result<T, ConfigError> {
    serde_json::from_value(v.clone()).map_err(|e| ConfigError::WrongType {
        field: field.to_owned(),
        expected,
        found: e.to_string(),
    })
}

/// A list of taints (registerWithTaints), as the API spells a Node's.
impl ConfigValue for Vec<k8s_openapi::api::core::v1::Taint> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        decode_serde(v, field, "a list of taints (key, value, effect)")
    }
    fn encode(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

/// logging.vmodule's list.
impl ConfigValue for Vec<super::VModuleItem> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        decode_serde(v, field, "a list of {filePattern, verbosity}")
    }
    fn encode(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

/// logging.flushFrequency: a Go duration string or nanoseconds.
impl ConfigValue for super::FlushFrequency {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        match v {
            Value::Number(n) => {
                let nanos = n.as_u64().ok_or_else(|| {
                    invalid_value(
                        field,
                        format!("invalid duration \"{n}\": not a whole number of nanoseconds"),
                    )
                })?;
                Ok(super::FlushFrequency {
                    duration: Duration::from_nanos(nanos),
                    as_string: false,
                })
            }
            _ => Duration::decode(v, field).map(|duration| super::FlushFrequency {
                duration,
                as_string: true,
            }),
        }
    }
    fn encode(&self) -> Value {
        if self.as_string {
            self.duration.encode()
        } else {
            Value::from(u64::try_from(self.duration.as_nanos()).unwrap_or(u64::MAX))
        }
    }
    fn is_zero(&self) -> bool {
        self.duration.is_zero()
    }
}

/// shutdownGracePeriodByPodPriority's list, as upstream's JSON spells it.
impl ConfigValue for Vec<super::ShutdownGracePeriodByPodPriority> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        decode_serde(v, field, "a list of {priority, shutdownGracePeriodSeconds}")
    }
    fn encode(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

/// reservedMemory's list: `{numaNode, limits}` items, the limits'
/// quantities kept as written.
impl ConfigValue for Vec<super::MemoryReservation> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        let items = v
            .as_array()
            .ok_or_else(|| wrong_type(field, "a list of {numaNode, limits}", v))?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let at = format!("{field}[{i}]");
                let map = item
                    .as_object()
                    .ok_or_else(|| wrong_type(&at, "a mapping of numaNode and limits", item))?;
                if let Some(k) = map.keys().find(|k| *k != "numaNode" && *k != "limits") {
                    return Err(invalid_value(&join(&at, k), "unknown field"));
                }
                let numa_node = match map.get("numaNode") {
                    None => 0,
                    Some(n) => n
                        .as_i64()
                        .and_then(|n| i32::try_from(n).ok())
                        .ok_or_else(|| wrong_type(&join(&at, "numaNode"), "an int32", n))?,
                };
                let limits = match map.get("limits") {
                    None | Some(Value::Null) => BTreeMap::new(),
                    Some(l) => BTreeMap::<String, String>::decode(l, &join(&at, "limits"))?,
                };
                Ok(super::MemoryReservation { numa_node, limits })
            })
            .collect()
    }
    fn encode(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

/// A mapping of strings (numbers are read as their text, as upstream's
/// YAML to JSON conversion leaves `10%` and `100Mi` alike as strings).
impl ConfigValue for BTreeMap<String, String> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        let map = v
            .as_object()
            .ok_or_else(|| wrong_type(field, "a mapping", v))?;
        map.iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                Value::Number(n) => Ok((k.clone(), n.to_string())),
                other => Err(wrong_type(&join(field, k), "a string", other)),
            })
            .collect()
    }
    fn encode(&self) -> Value {
        Value::Object(
            self.iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        )
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

/// A mapping whose values each decode as `T` (named `field.key` in
/// errors).
fn decode_map<T: ConfigValue>(v: &Value, field: &str) -> Result<BTreeMap<String, T>, ConfigError> {
    v.as_object()
        .ok_or_else(|| wrong_type(field, "a mapping", v))?
        .iter()
        .map(|(k, v)| Ok((k.clone(), T::decode(v, &join(field, k))?)))
        .collect()
}

fn encode_map<T: ConfigValue>(map: &BTreeMap<String, T>) -> Value {
    Value::Object(map.iter().map(|(k, v)| (k.clone(), v.encode())).collect())
}

/// A mapping of names to lists of strings (`staticPodURLHeader`, as
/// Go's http.Header).
impl ConfigValue for BTreeMap<String, Vec<String>> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        decode_map(v, field)
    }
    fn encode(&self) -> Value {
        encode_map(self)
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

/// A mapping of names to booleans (`featureGates`).
impl ConfigValue for BTreeMap<String, bool> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        decode_map(v, field)
    }
    fn encode(&self) -> Value {
        encode_map(self)
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

/// The resources `systemReserved` and `kubeReserved` may name
/// (upstream's parseResourceList).
pub const RESERVABLE: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];

/// A reservation (`cpu: 100m`, `memory: 1Gi`, `pid: "1000"`): each amount
/// parsed, cpu in milli-CPUs (rounded to the nearest, as upstream), none
/// negative, only what may be reserved.
impl ConfigValue for BTreeMap<String, i64> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        let map = v
            .as_object()
            .ok_or_else(|| wrong_type(field, "a mapping", v))?;
        map.iter()
            .map(|(k, v)| {
                let text = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    other => return Err(wrong_type(&join(field, k), "a quantity", other)),
                };
                let amount =
                    reserved_amount(k, &text).map_err(|e| invalid_value(field, e.to_string()))?;
                Ok((k.clone(), amount))
            })
            .collect()
    }
    fn encode(&self) -> Value {
        Value::Object(
            self.iter()
                .map(|(k, v)| {
                    let text = if k == "cpu" {
                        format!("{v}m")
                    } else {
                        v.to_string()
                    };
                    (k.clone(), Value::String(text))
                })
                .collect(),
        )
    }
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

/// A reservation upstream's parseResourceList refuses, in its words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReservationError {
    #[error("cannot reserve {0:?} resource")]
    Resource(String),
    #[error("failed to parse quantity {text:?} for {resource:?} resource: {message}")]
    Quantity {
        text: String,
        resource: String,
        message: String,
    },
    #[error("resource quantity for {resource:?} cannot be negative: {text}")]
    Negative { resource: String, text: String },
    #[error("{0:?} is not resource=quantity")]
    Pair(String),
}

/// One reserved amount, checked as upstream's parseResourceList checks it.
pub fn reserved_amount(resource: &str, text: &str) -> Result<i64, ReservationError> {
    if !RESERVABLE.contains(&resource) {
        return Err(ReservationError::Resource(resource.to_owned()));
    }
    let q = Quantity(text.to_owned());
    let amount = if resource == "cpu" {
        parse_cpu_millis_nearest(&q)
    } else {
        parse_bytes(&q)
    }
    .map_err(|e| ReservationError::Quantity {
        text: text.to_owned(),
        resource: resource.to_owned(),
        message: e.message,
    })?;
    if amount < 0 {
        return Err(ReservationError::Negative {
            resource: resource.to_owned(),
            text: text.to_owned(),
        });
    }
    Ok(amount)
}

/// Strings with a fixed set of spellings (`cgroupDriver`, `tlsMinVersion`,
/// `authorization.mode`), each parsed by its `FromStr` and spelled by its
/// `as_str`; empty in the file is the default.
macro_rules! spelled {
    ($($ty:ty),*) => {$(
        impl ConfigValue for $ty {
            fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
                let s = v.as_str().ok_or_else(|| wrong_type(field, "a string", v))?;
                if s.is_empty() {
                    return Ok(<$ty>::default());
                }
                s.parse()
                    .map_err(|e: <$ty as std::str::FromStr>::Err| invalid_value(field, e.to_string()))
            }
            fn encode(&self) -> Value {
                Value::String(self.as_str().to_owned())
            }
            fn is_zero(&self) -> bool {
                false
            }
        }
    )*};
}
spelled!(
    super::CgroupDriver,
    super::TlsMinVersion,
    super::AuthorizationMode
);

/// The field `key` of `path` (the top level when `path` is empty).
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A section of the configuration (the whole of it, `authentication`,
/// `authorization.webhook`, `tracing`...): a mapping in the file.
pub trait Section: Default {
    /// Decode the fields of `map` it knows (removing them), the others
    /// left in `map`; `path` names the section in errors.
    fn decode_from(map: &mut Map<String, Value>, path: &str) -> Result<Self, ConfigError>;
    /// Its fields as `/configz` shows them.
    fn encode_into(&self, map: &mut Map<String, Value>);
}

/// Declares a section's fields once, each as
///
/// ```text
/// /// doc
/// "nameInTheFile" rust_name: Type = default;                // a value given replaces the default
/// "nameInTheFile" rust_name: Type = default, zero_is_unset; // Go's zero value keeps the default
/// ```
///
/// and derives the struct (with the docs), its `Default` (upstream's
/// defaults) and its [`Section`] decoder and encoder. `zero_is_unset`
/// marks fields upstream's defaulting replaces when they hold Go's zero
/// value (non-pointer fields); fields without it keep a zero given
/// (upstream's pointer fields: `healthzPort: 0` disables the endpoint).
macro_rules! config_section {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                $wire:literal $field:ident: $ty:ty = $default:expr $(, $zero:ident)?;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $( $field: $default, )* }
            }
        }

        impl $crate::config::value::Section for $name {
            fn decode_from(
                map: &mut serde_json::Map<String, serde_json::Value>,
                path: &str,
            ) -> Result<Self, $crate::config::ConfigError> {
                let mut out = Self::default();
                $(
                    if let Some(v) = map.remove($wire).filter(|v| !v.is_null()) {
                        let field = $crate::config::value::join(path, $wire);
                        let value =
                            <$ty as $crate::config::value::ConfigValue>::decode(&v, &field)?;
                        let unset = config_section!(@zero $($zero)?)
                            && $crate::config::value::ConfigValue::is_zero(&value);
                        if !unset {
                            out.$field = value;
                        }
                    }
                )*
                Ok(out)
            }

            fn encode_into(&self, map: &mut serde_json::Map<String, serde_json::Value>) {
                $( map.insert(
                    $wire.to_owned(),
                    $crate::config::value::ConfigValue::encode(&self.$field),
                ); )*
            }
        }

        /// Nested in another section: a mapping whose every key is one of
        /// its fields.
        impl $crate::config::value::ConfigValue for $name {
            fn decode(
                v: &serde_json::Value,
                field: &str,
            ) -> Result<Self, $crate::config::ConfigError> {
                $crate::config::value::decode_section(v, field)
            }
            fn encode(&self) -> serde_json::Value {
                let mut map = serde_json::Map::new();
                $crate::config::value::Section::encode_into(self, &mut map);
                serde_json::Value::Object(map)
            }
            fn is_zero(&self) -> bool {
                false
            }
        }
    };
    (@zero zero_is_unset) => { true };
    (@zero) => { false };
}
pub(crate) use config_section;

/// A section nested in another: a mapping whose every key is one of its
/// fields (another key is `unknown field "section.key"`).
pub fn decode_section<S: Section>(v: &Value, field: &str) -> Result<S, ConfigError> {
    let mut map = v
        .as_object()
        .cloned()
        .ok_or_else(|| wrong_type(field, "a mapping", v))?;
    let section = S::decode_from(&mut map, field)?;
    match map.keys().next() {
        Some(key) => Err(ConfigError::UnknownField(join(field, key))),
        None => Ok(section),
    }
}

/// An optional section (`tracing`): absent or null is none; present, its
/// fields' defaults fill what it leaves out.
impl<S: Section> ConfigValue for Option<S> {
    fn decode(v: &Value, field: &str) -> Result<Self, ConfigError> {
        decode_section(v, field).map(Some)
    }
    fn encode(&self) -> Value {
        self.as_ref().map_or(Value::Null, |s| {
            let mut map = Map::new();
            s.encode_into(&mut map);
            Value::Object(map)
        })
    }
    fn is_zero(&self) -> bool {
        self.is_none()
    }
}
