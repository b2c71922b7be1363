"""Peak prediction: decaying usage histograms per pod / priority class / system, and the Prod reclaimable and
peak numbers NodeMetric reports (upstream ``pkg/koordlet/prediction``)."""

from koordlet.prediction.reclaimable import PodRequest, ReclaimPrediction, node_allocatable, predict_prod_reclaimable
from koordlet.prediction.server import PeakPredictServer, PodUsage, PredictionConfig, Resources, TrainingSamples, Usage

__all__ = ["PeakPredictServer", "PodRequest", "PodUsage", "PredictionConfig", "ReclaimPrediction", "Resources",
           "TrainingSamples", "Usage", "node_allocatable", "predict_prod_reclaimable"]
