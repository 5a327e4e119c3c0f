{{
  config(
    materialized='catalog_incremental',
    unique_key='capture_key',
  )
}}
{#- One row per capture with a raw copy. Incremental: only captures whose staged rows
    changed since the last build are recomputed (macros/incremental.sql). The old rows of
    changed captures that already had one are deleted after the insert: replaced, or
    gone when the capture's raw copy was removed (macros/catalog_incremental.sql). -#}
-- depends_on: {{ source('platform', 'item_versions') }}
{%- set changes = catalog_changes() %}
{{ catalog_plan(changes, replace=changed_keys(changes.watermark) if changes.old_keys > 0 else none) -}}
with {{ changed_cte(changes) }}
batch as (
  select {{ current_batch() }} as number
),
manifests as (
  select * from {{ changed_rows(source('platform', 'raw_manifests'), changes) }}
),
headers as (
  select * from {{ changed_rows(source('platform', 'trajectory_headers'), changes) }}
),
quality as (
  select * from {{ changed_rows(source('platform', 'quality_rows'), changes) }}
),
gates as (
  select * from {{ changed_rows(source('platform', 'quality_gates'), changes) }}
),
formats as (
  select * from {{ source('platform', 'export_formats') }}
),
memberships as (
  select capture_key,
         string_agg(release || '@v' || version, ',' order by release, version) as releases
  from {{ changed_rows(source('platform', 'release_episodes'), changes) }}
  group by capture_key
)
{%- for fmt in var('export_formats') %},
receipts_{{ fmt }} as (
  select * from {{ changed_rows(source('platform', 'export_receipts_' ~ fmt), changes) }}
)
{%- endfor %}

select
  m.capture_key,
  coalesce(h.source_kind, m.raw_kind) as source_kind,
  m.raw_kind,
  h.device,
  h.task,
  h.demonstrator,
  h.split,
  h.dataset_name,
  m.source_dataset,
  coalesce(h.duration_s, q.duration_s) as duration_s,
  h.n_streams,
  h.stream_names,
  h.started_at,
  m.landed_at,
  cast(m.landed_at as date) as landing_day,
  m.raw_files,
  m.raw_bytes,
  coalesce(q.status, 'pending') as quality_status,
  nullif(q.worst_metric, '') as worst_metric,
  q.n_fail,
  q.n_warn,
  q.n_pass,
  q.n_retries,
  q.max_longest_gap_s,
  q.max_missing_sample_ratio,
  q.left_tracking_loss_ratio,
  q.right_tracking_loss_ratio,
  greatest(q.left_jitter_mps3, q.right_jitter_mps3) as jitter_mps3_max,
  q.report_version,
  q.thresholds_version,
  case when g.capture_key is null then 'pending'
       when g.gate_passed then 'allowed'
       else 'blocked' end as gate,
  g.policy_version,
  g.blocking_reasons,
  g.gx_errors,
  g.gx_warnings,
  coalesce(g.waived, false) as waived,
  g.waivers,
  coalesce(g.gate_passed, false) as usable,
  rl.releases
{%- for fmt in var('export_formats') %},
  case
    when list_contains(g.blocked_formats, '{{ fmt }}') then 'blocked'
    when r_{{ fmt }}.capture_key is null then 'missing'
    when r_{{ fmt }}.input_data_version = g.gate_data_version
         and (f_{{ fmt }}.current_code_version is null
              or r_{{ fmt }}.code_version = f_{{ fmt }}.current_code_version)
         then case when r_{{ fmt }}.status = 'skipped' then 'skipped' else 'exported' end
    else 'stale'
  end as {{ fmt }}_state,
  case when r_{{ fmt }}.status = 'skipped' then r_{{ fmt }}.reason end
    as {{ fmt }}_skip_reason,
  r_{{ fmt }}.bytes as {{ fmt }}_bytes,
  r_{{ fmt }}.code_version as {{ fmt }}_code_version,
  r_{{ fmt }}.exported_at as {{ fmt }}_exported_at
{%- endfor %},
  b.number as _batch
from manifests m
cross join batch b
left join headers h using (capture_key)
left join quality q using (capture_key)
left join gates g using (capture_key)
left join memberships rl using (capture_key)
{%- for fmt in var('export_formats') %}
left join receipts_{{ fmt }} r_{{ fmt }} using (capture_key)
left join formats f_{{ fmt }} on f_{{ fmt }}.format = '{{ fmt }}'
{%- endfor %}
