{{ config(materialized='stable_view') }}
{#- Per landing day and source kind: status counts, gate outcomes and the worst figures.
    A view, like the other aggregates: one scan of `episodes` per query (about 0.1 s at
    1M episodes, docs/catalog.md), so a refresh never touches it and a day whose
    captures were rebuilt or removed is counted as it is now. -#}
with metric_counts as (
  select landing_day, source_kind, worst_metric, count(*) as n
  from {{ ref('episodes') }}
  where worst_metric is not null
  group by landing_day, source_kind, worst_metric
),
worst as (
  select landing_day, source_kind, worst_metric, n
  from metric_counts
  qualify row_number() over (partition by landing_day, source_kind
                             order by n desc, worst_metric) = 1
)
select
  e.landing_day,
  e.source_kind,
  count(*) as episodes,
  sum(e.duration_s) / 3600.0 as hours,
  count_if(e.quality_status = 'pass') as pass_episodes,
  count_if(e.quality_status = 'warn') as warn_episodes,
  count_if(e.quality_status = 'fail') as fail_episodes,
  count_if(e.quality_status = 'pending') as pending_episodes,
  count_if(e.gate = 'blocked') as blocked_episodes,
  count_if(e.waived) as waived_episodes,
  any_value(w.worst_metric) as top_worst_metric,
  coalesce(any_value(w.n), 0) as top_worst_metric_episodes,
  max(e.max_longest_gap_s) as max_longest_gap_s,
  quantile_cont(greatest(e.left_tracking_loss_ratio, e.right_tracking_loss_ratio), 0.95)
    as p95_tracking_loss_ratio,
  max(e.jitter_mps3_max) as max_jitter_mps3
from {{ ref('episodes') }} e
left join worst w using (landing_day, source_kind)
group by e.landing_day, e.source_kind
