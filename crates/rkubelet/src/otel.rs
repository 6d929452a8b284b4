//! OTLP export of rkubelet's tracing spans (upstream's `tracing` section of
//! the KubeletConfiguration): when configured, a tracing layer hands the
//! spans (the lifecycle steps, every CRI call) to an OTLP/gRPC exporter that
//! batches them on the tokio runtime; without the section there is no layer
//! and spans cost what `tracing` costs when nobody listens.

use std::time::Duration;

use kubelet_core::config::TracingConfiguration;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::{Resource, runtime};
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// The service name spans carry, as upstream's kubelet reports itself.
const SERVICE_NAME: &str = "kubelet";
/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The collector URL from upstream's `host:port` endpoint (a URL is kept).
pub fn collector_url(endpoint: &str) -> String {
    if endpoint.contains("://") {
        endpoint.to_owned()
    } else {
        format!("http://{endpoint}")
    }
}

/// The sampler upstream's samplingRatePerMillion means: sampled parents are
/// followed, new traces sampled at that rate.
pub fn sampler(rate_per_million: u32) -> Sampler {
    Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
        f64::from(rate_per_million) / 1e6,
    )))
}

/// The provider exporting to `cfg.endpoint`; must be built inside the tokio
/// runtime (the batch processor runs on it). Keep it and call `shutdown`
/// before exiting, so the last batch is sent.
pub fn provider(cfg: &TracingConfiguration) -> anyhow::Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(collector_url(&cfg.endpoint))
        .with_timeout(EXPORT_TIMEOUT)
        .build()?;
    let batch = BatchSpanProcessor::builder(exporter, runtime::Tokio).build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(batch)
        .with_sampler(sampler(cfg.sampling_rate_per_million))
        .with_resource(Resource::builder().with_service_name(SERVICE_NAME).build())
        .build())
}

/// The tracing layer feeding `provider`.
pub fn layer<S>(provider: &SdkTracerProvider) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    tracing_opentelemetry::layer().with_tracer(provider.tracer("rkubelet"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_rates() {
        assert_eq!(collector_url("otel:4317"), "http://otel:4317");
        assert_eq!(collector_url("https://otel:4317"), "https://otel:4317");
        assert!(matches!(sampler(0), Sampler::ParentBased(_)));
    }

    /// Spans reach an OTLP collector: a tonic TraceService in the test.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn spans_are_exported_to_the_collector() {
        use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
            TraceService, TraceServiceServer,
        };
        use opentelemetry_proto::tonic::collector::trace::v1::{
            ExportTraceServiceRequest, ExportTraceServiceResponse,
        };
        use tracing_subscriber::layer::SubscriberExt;

        #[derive(Clone, Default)]
        struct Collector(std::sync::Arc<parking_lot::Mutex<Vec<String>>>);
        #[tonic::async_trait]
        impl TraceService for Collector {
            async fn export(
                &self,
                req: tonic::Request<ExportTraceServiceRequest>,
            ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
                let names = req
                    .into_inner()
                    .resource_spans
                    .into_iter()
                    .flat_map(|r| r.scope_spans)
                    .flat_map(|s| s.spans)
                    .map(|s| s.name);
                self.0.lock().extend(names);
                Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
            }
        }
        let collector = Collector::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
        tokio::spawn(server);

        let provider = provider(&TracingConfiguration {
            endpoint: addr.to_string(),
            sampling_rate_per_million: 1_000_000,
        })
        .unwrap();
        let subscriber = tracing_subscriber::registry().with(layer(&provider));
        tracing::subscriber::with_default(subscriber, || {
            let _span = tracing::info_span!("SyncPod").entered();
        });
        let p = provider.clone();
        kubelet_tasks::off_thread(move || p.force_flush())
            .await
            .unwrap()
            .unwrap();
        let names = collector.0.lock().clone();
        assert_eq!(names, ["SyncPod"]);
        let _ = kubelet_tasks::off_thread(move || provider.shutdown()).await;
    }
}
