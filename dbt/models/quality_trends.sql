{{
  config(
    materialized='incremental',
    unique_key=['landing_day', 'source_kind'],
    incremental_strategy='delete+insert',
  )
}}
{#- Per landing day and source kind. Incremental: only the (day, kind) groups that hold
    an episode rebuilt in `episodes` since this table's last build are recomputed. Rebuilt
    episodes carry a newer `_batch` and sit in the last row groups of `episodes`; their
    landing days, looked up while dbt compiles the model, bound the rows read. -#}
{%- set days = [] %}
{%- if execute and is_incremental() %}
  {%- set watermark_sql = '(select coalesce(max(_batch), -1) from ' ~ this ~ ')' %}
  {%- set found = run_query(
        'select ' ~ watermark_sql ~ ' as watermark, '
        ~ "(select coalesce(string_agg(distinct landing_day::varchar, ','), '') from "
        ~ ref('episodes') ~ ' where _batch > ' ~ watermark_sql ~ ') as days'
      ).rows[0] %}
  {%- set watermark = found['watermark'] | int %}
  {%- for day in found['days'].split(',') | sort if day %}{% do days.append(day) %}{% endfor %}
{%- endif %}
with touched as (
  select distinct landing_day, source_kind from {{ ref('episodes') }}
  {%- if is_incremental() %} where _batch > {{ watermark }}{% endif %}
),
scope as (
  select e.* from {{ ref('episodes') }} e
  {%- if is_incremental() %}
  semi join touched t using (landing_day, source_kind)
  where e.landing_day in (
    {%- for day in days %}date '{{ day }}'{{ ', ' if not loop.last }}{% endfor %}
    {%- if not days %}null{% endif %})
  {%- endif %}
),
metric_counts as (
  select landing_day, source_kind, worst_metric, count(*) as n
  from scope
  where worst_metric is not null
  group by landing_day, source_kind, worst_metric
),
worst as (
  select *, row_number() over (partition by landing_day, source_kind
                               order by n desc, worst_metric) as rank
  from metric_counts
),
batch as (
  select {{ current_batch() }} as number
)
select
  s.landing_day,
  s.source_kind,
  count(*) as episodes,
  sum(s.duration_s) / 3600.0 as hours,
  count_if(s.quality_status = 'pass') as pass_episodes,
  count_if(s.quality_status = 'warn') as warn_episodes,
  count_if(s.quality_status = 'fail') as fail_episodes,
  count_if(s.quality_status = 'pending') as pending_episodes,
  count_if(s.gate = 'blocked') as blocked_episodes,
  count_if(s.waived) as waived_episodes,
  any_value(w.worst_metric) as top_worst_metric,
  coalesce(any_value(w.n), 0) as top_worst_metric_episodes,
  max(s.max_longest_gap_s) as max_longest_gap_s,
  quantile_cont(greatest(s.left_tracking_loss_ratio, s.right_tracking_loss_ratio), 0.95)
    as p95_tracking_loss_ratio,
  max(s.jitter_mps3_max) as max_jitter_mps3,
  any_value(b.number) as _batch
from scope s
cross join batch b
left join worst w
  on w.landing_day = s.landing_day and w.source_kind = s.source_kind and w.rank = 1
group by s.landing_day, s.source_kind
