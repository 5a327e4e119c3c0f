{{
  config(
    materialized='catalog_incremental',
    unique_key=['landing_day', 'source_kind'],
  )
}}
{#- Per landing day and source kind. Incremental: only the (day, kind) groups that hold
    an episode rebuilt in `episodes` since this table's last build are recomputed. Rebuilt
    episodes carry a newer `_batch` and sit in the last row groups of `episodes`; their
    landing days, looked up while dbt compiles the model, bound the rows read. -#}
{%- set rebuilt = '(select landing_day from ' ~ ref('episodes')
                  ~ ' where _batch > ' ~ catalog_watermark_sql() ~ ')' %}
{%- set changes = catalog_lookup({
      'days': "(select coalesce(string_agg(distinct landing_day::varchar, ','), '') from "
              ~ rebuilt ~ ')',
      'old_days': '(select count(*) from ' ~ this ~ ' where landing_day in ' ~ rebuilt ~ ')',
    }) %}
{%- set days = [] %}
{%- if not changes.full %}
  {%- for day in changes.days.split(',') | sort if day %}{% do days.append(day) %}{% endfor %}
{%- endif %}
{#- Older rows of a rebuilt (day, kind) group, if any, go after the insert. -#}
{{ catalog_plan(changes, replace=none if changes.full or (changes.old_days | int) == 0
     else 'select landing_day, source_kind from ' ~ this ~ ' where _batch > ' ~ changes.watermark) -}}
with touched as (
  select distinct landing_day, source_kind from {{ ref('episodes') }}
  {%- if not changes.full %} where _batch > {{ changes.watermark }}{% endif %}
),
scope as (
  select e.* from {{ ref('episodes') }} e
  {%- if not changes.full %}
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
