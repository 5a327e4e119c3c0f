{{ config(materialized='stable_view') }}
{#- One row per episode of every dataset release version (releases/<name>/v<N>/
    release.json, staged by ego_assets.catalog.releases). A view: always current. -#}
select
  r.release,
  r.version,
  r.release || '@v' || r.version as release_version,
  r.capture_key,
  r.split,
  r.demonstrator,
  v.path as release_path
from {{ source('platform', 'release_episodes') }} r
join {{ source('platform', 'release_versions') }} v using (release, version)
